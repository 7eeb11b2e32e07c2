"""DESIGN.md semantics 2, deterministic: the same sequence on every run, whatever the prefetch
depth (whatever the worker count: tests/run/workers/test_engine.py)."""

import pytest

from tests.semantics.numbered import flat, make


@pytest.mark.parametrize("prefetch", [0, 1, 4])
def test_same_sequence_whatever_the_prefetch(prefetch):
    expected = flat(make(batch=4, epochs=3).iterator())
    assert flat(make(batch=4, epochs=3, prefetch=prefetch).iterator()) == expected


def test_same_sequence_on_every_run():
    a = flat(make(n=1000, batch=32, epochs=2).iterator())
    b = flat(make(n=1000, batch=32, epochs=2).iterator())
    assert a == b
