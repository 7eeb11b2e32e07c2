"""Pipelines over the records 0..N-1, so that every delivery can be checked: what the semantics
tests build, and how they read back the records of an item."""

import numpy as np

import tpufeed

N = 37


def make(n=N, seed=7, hosts=1, host=0, batch=None, drop=False, epochs=1, prefetch=0, extra=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n)))
    if seed is not None:
        ds = ds.shuffle(seed)
    ds = ds.shard(host, hosts).map(lambda r: {"record": np.int64(r)})
    if extra is not None:
        ds = extra(ds)
    if batch is not None:
        ds = ds.batch(batch, drop_remainder=drop)
    return ds.repeat(epochs).prefetch(prefetch)


def records_of(item):
    return np.atleast_1d(item["record"]).tolist()


def flat(items):
    return [r for item in items for r in records_of(item)]


def noisy(ds):
    return ds.random_map(lambda e, rng: {**e, "noise": rng.integers(0, 2**62)})
