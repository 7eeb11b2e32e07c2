"""MosaicML Streaming's MDS format: the source (`source`), the index and shard layout with the
column encodings (`layout`), and one shard read by record index (`shard`)."""
