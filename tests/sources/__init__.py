"""Tests of tpufeed/sources/: record formats and their readers, and the conformance suite every
source passes."""
