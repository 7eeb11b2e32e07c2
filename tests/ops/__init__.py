"""Tests of tpufeed/ops/: what each stage does to elements."""
