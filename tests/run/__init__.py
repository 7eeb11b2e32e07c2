"""Tests of tpufeed/run/: executing a plan, in this process or in workers."""
