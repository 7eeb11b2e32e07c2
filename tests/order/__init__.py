"""Tests of tpufeed/order/: the pure arithmetic of which record goes where, without I/O."""
