"""Tests of tpufeed/beam/: WriteShards and the offline build, on Beam's in-process runner."""
