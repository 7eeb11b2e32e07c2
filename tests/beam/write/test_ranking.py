"""The arithmetic that places records in shards: balanced, contiguous, order-preserving keys."""

from __future__ import annotations

import random

import pytest

from tpufeed.beam.write import ranking
from tpufeed.errors import InvalidArgumentError, TpufeedError


@pytest.mark.parametrize("total", [1, 2, 5, 10, 17, 100, 1001])
@pytest.mark.parametrize("num_shards", [1, 2, 3, 7, 8, 64])
def test_shards_are_contiguous_and_balanced(total, num_shards):
    sizes = ranking.shard_sizes(total, num_shards)
    assert sum(sizes) == total and len(sizes) == num_shards
    assert max(sizes) - min(sizes) <= 1
    shards = [ranking.shard_of(p, total, num_shards) for p in range(total)]
    assert shards == sorted(shards)
    assert [shards.count(i) for i in range(num_shards)] == sizes


def test_fewer_records_than_shards_leaves_empty_shards():
    assert ranking.shard_sizes(2, 5) == [0, 0, 1, 0, 1]
    assert ranking.shard_sizes(0, 3) == [0, 0, 0]


def test_rank_outside_the_dataset_is_refused():
    with pytest.raises(InvalidArgumentError, match="rank 10"):
        ranking.shard_of(10, 10, 2)


def test_order_keys_sort_like_tuples():
    rng = random.Random(0)
    keys = [
        tuple(rng.randrange(0, 2 ** rng.choice([3, 20, 64])) for _ in range(rng.randint(1, 3)))
        for _ in range(500)
    ]
    assert sorted(keys, key=ranking.order_key) == sorted(keys)
    assert ranking.order_key(5) == ranking.order_key((5,))
    assert ranking.order_key(b"\x01") == b"\x01"


@pytest.mark.parametrize("bad", [(-1,), (2**64,), (1.5,), ("a",), [1], (True,), None])
def test_bad_order_keys_are_refused(bad):
    with pytest.raises(TpufeedError, match="order key"):
        ranking.order_key(bad)


def test_bucket_starts_are_prefix_sums_in_bucket_order():
    starts, total = ranking.bucket_starts({3: 5, 0: 2, 1: 0, 7: 1})
    assert (starts, total) == ({0: 0, 1: 2, 3: 2, 7: 7}, 8)


def test_buckets_are_monotone_in_the_key():
    splitters = [b"b", b"d", b"d", b"x"]
    keys = sorted([b"a", b"b", b"c", b"d", b"e", b"z", b"", b"dd"])
    buckets = [ranking.bucket_of(k, splitters) for k in keys]
    assert buckets == sorted(buckets)


def test_content_key_depends_on_bytes_only():
    assert ranking.content_key(b"abc") == ranking.content_key(bytes(bytearray(b"abc")))
    assert ranking.content_key(b"abc") != ranking.content_key(b"abd")
    assert len(ranking.content_key(b"")) == 16
