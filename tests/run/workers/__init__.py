"""Tests of tpufeed/run/workers/: the process pool, the fork server, shared-memory slots."""
