"""Tests of tpufeed/cli/: the `tpufeed` command (build, inspect, bench, cache, quickstart), run as
a user runs it."""
