"""The sample that `WriteShards(keyed=True)` cuts its keys at: deterministic, about
`SAMPLES_PER_BUCKET` keys a bucket, and cut points that split the keys evenly."""

from __future__ import annotations

import random

from tpufeed.beam.write import ranking
from tpufeed.beam.write.key_cuts import SAMPLES_PER_BUCKET, cut_points, in_sample, sample_every


def test_the_rate_gives_about_the_samples_a_bucket_asks_for():
    assert sample_every(10, 40) == 1  # small inputs: every key
    assert sample_every(1_000_000_000, 40_000) == 1_000_000_000 // (40_000 * SAMPLES_PER_BUCKET)
    keys = [i.to_bytes(8, "big") for i in range(200_000)]
    every = sample_every(len(keys), 40)
    sampled = [k for k in keys if in_sample(k, every)]
    assert abs(len(sampled) - 40 * SAMPLES_PER_BUCKET) < 0.15 * 40 * SAMPLES_PER_BUCKET
    assert sampled == [k for k in keys if in_sample(bytes(k), every)]  # by the bytes alone


def test_cut_points_split_the_keys_evenly():
    rng = random.Random(0)
    keys = [rng.getrandbits(64).to_bytes(8, "big") for _ in range(100_000)]
    buckets = 16
    every = sample_every(len(keys), buckets)
    cuts = cut_points([k for k in keys if in_sample(k, every)], buckets)
    assert cuts == sorted(cuts) and len(cuts) == buckets - 1
    sizes = [0] * buckets
    for key in keys:
        sizes[ranking.bucket_of(key, cuts)] += 1
    assert max(sizes) < 1.6 * len(keys) / buckets  # ±18% expected; never one heavy bucket


def test_cut_points_of_few_or_repeated_keys():
    assert cut_points([], 8) == []
    assert cut_points([b"b", b"a"], 8) == [b"a", b"b"]  # fewer cuts than buckets asked
    assert cut_points([b"k"] * 50, 4) == [b"k"]
