"""Datasets written by tpufeed's build (`Dataset.open`): the manifest and its checks
(`manifest`, `fields`), shards checked against it (`verified_shard`), and the record formats
their shards hold (`record_formats`, `tf_example_records`)."""
