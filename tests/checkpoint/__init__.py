"""Tests of tpufeed/checkpoint/: state files, and saving and restoring with the real Orbax."""
