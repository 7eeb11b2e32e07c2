"""The shard cache: local copies of remote objects, keyed by their version, on local disk.

`shard_cache` (ShardCache, the front), where copies and their records lie (`layout`), fetching
a copy (`fill`, as parallel ranged GETs: `transfers`), checking it (`verified`), the room it
takes and what to evict (`space`, `eviction`, `inventory`), copies held open by readers
(`holds`), fetching ahead in plan order (`readahead`), and a full or unwritable disk as named
errors (`disk_errors`)."""
