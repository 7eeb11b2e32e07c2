"""Writing a build's output: records ranked into balanced shards, spilled chunks, each shard
written in place, the manifest and its statistics, and the switch to the new dataset.
"""
