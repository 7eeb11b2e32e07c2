"""WebDataset tar shards: the source and one shard's reader (`tar`), the sample index of a shard
(`index`), and how each member's field is decoded (`fields`)."""
