"""WebDataset tar shards: the source and one shard's reader (`tar`), shard names as WebDataset
users write them (`urls`: brace ranges, `::`, `file:` URLs), the bounded walk of a tar's
headers (`headers`), the sample index of a shard (`index`) and its file on disk, derived from
the tar (`index_file`), a gzip shard's decompressed copy (`copies`), and how each member's
field is decoded (`fields`; the bounded readers of tenbin and cbor: `tenbin`, `cbor`)."""
