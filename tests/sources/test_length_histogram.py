"""Length histograms: fixed edges that tile the lengths, one add or many alike, exact merges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpufeed.sources.built.length_histogram import (
    EXACT_BELOW,
    LengthHistogram,
    bucket_edges,
    bucket_of,
)


def test_the_buckets_tile_the_lengths_and_are_at_most_an_eighth_wide():
    previous_high = -1
    for bucket in range(400):
        low, high = bucket_edges(bucket)
        assert low == previous_high + 1
        assert bucket_of(np.array([low, high])).tolist() == [bucket, bucket]
        assert high - low + 1 <= max(1, low // 8)
        previous_high = high
    assert [bucket_edges(b) for b in range(EXACT_BELOW)] == [(n, n) for n in range(EXACT_BELOW)]
    assert bucket_edges(bucket_of(np.array([1024]))[0]) == (1024, 1151)


@pytest.mark.parametrize("length", [2**52, 2**53 - 1, 2**53 + 1, 2**62 - 1, 2**63 - 1])
def test_lengths_past_a_float_s_precision_land_in_their_bucket(length):
    low, high = bucket_edges(int(bucket_of(np.array([length]))[0]))
    assert low <= length <= high


@given(st.lists(st.integers(0, 1 << 40), max_size=60), st.integers(0, 60))
def test_add_and_add_many_agree_and_merging_is_exact(lengths, cut):
    one, left, right, whole = (LengthHistogram() for _ in range(4))
    for n in lengths:
        one.add(n)
    whole.add_many(lengths)
    left.add_many(lengths[:cut])
    right.add_many(lengths[cut:])
    right.merge(left)
    assert one.to_json() == whole.to_json() == right.to_json()
    assert sum(n for _, _, n in whole.rows()) == len(lengths)
    for low, high, n in whole.rows():
        assert n == sum(low <= x <= high for x in lengths)
    assert LengthHistogram.from_json(whole.to_json()).to_json() == whole.to_json()


def test_an_empty_histogram():
    empty = LengthHistogram()
    empty.add_many([])
    assert empty.to_json() == {
        "count": 0,
        "min": None,
        "max": None,
        "sum": 0,
        "mean": None,
        "histogram": [],
    }
