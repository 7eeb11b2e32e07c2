"""Tests of tpufeed/storage/: local and gs:// files, the local-SSD shard cache, retries."""
