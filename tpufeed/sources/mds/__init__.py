"""MosaicML Streaming's MDS format: the source (`source`), the index and shard layout
(`layout`), the column encodings (`columns`), one shard read by record index (`shard`), the
index's hashes checked (`hashes`), and compressed shards' decompressed copies (`copies`)."""
