"""WebDataset tar shards: the source and one shard's reader (`tar`), the bounded walk of a tar's
headers (`headers`), the sample index of a shard (`index`) and its file on disk, derived from
the tar (`index_file`), and how each member's field is decoded (`fields`)."""
