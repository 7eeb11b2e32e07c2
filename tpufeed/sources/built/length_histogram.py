"""Histograms of lengths with fixed bucket edges, so that merging two is adding their counts.

The build records one for each sequence field and for the records' sizes
(`tpufeed.sources.built.statistics`). Every length below 16 has a bucket of its own; above,
each power of two [2^k, 2^(k+1)) is cut into 8 equal buckets, so a bucket is at most 1/8 of
its lengths wide (16-17, 18-19, ..., 30-31, 32-35, ..., 60-63, 64-71, ...; 1,024-1,151,
1,152-1,279, ...). The edges depend on nothing else: histograms made on different workers
merge exactly, in any order. A histogram travels as rows `[lowest, highest, count]` of its
non-empty buckets, in order; `check_rows` refuses rows that are not buckets of this scheme.

>>> h = LengthHistogram(); h.add_many(np.array([3, 17, 1000, 1030]))
>>> h.rows()
[[3, 3, 1], [16, 17, 1], [960, 1023, 1], [1024, 1151, 1]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EXACT_BELOW", "SUB_BUCKETS", "LengthHistogram", "bucket_edges", "bucket_of"]

EXACT_BELOW = 16  # lengths below this have a bucket each
SUB_BUCKETS = 8  # buckets per power of two above it
_SHIFT = 3  # log2(SUB_BUCKETS)
_FIRST_POWER = 4  # log2(EXACT_BELOW)


def bucket_of(lengths: np.ndarray) -> np.ndarray:
    """The bucket index of each non-negative length (int64 array in, int64 array out)."""
    values = np.asarray(lengths, dtype=np.int64)
    power = np.frexp(values)[1].astype(np.int64) - 1  # floor(log2(v)) for v >= 1
    power -= (values >> np.maximum(power, 0)) == 0  # a float rounded up past 2**53
    power = np.maximum(power, _FIRST_POWER)
    sub = (values >> (power - _SHIFT)) - SUB_BUCKETS  # 0..7 above EXACT_BELOW
    log_linear = EXACT_BELOW + (power - _FIRST_POWER) * SUB_BUCKETS + sub
    return np.where(values < EXACT_BELOW, values, log_linear)


def bucket_edges(bucket: int) -> tuple[int, int]:
    """(lowest, highest) length of bucket `bucket`."""
    if bucket < EXACT_BELOW:
        return bucket, bucket
    power, sub = divmod(bucket - EXACT_BELOW, SUB_BUCKETS)
    width = 1 << (power + _FIRST_POWER - _SHIFT)
    low = (SUB_BUCKETS + sub) * width
    return low, low + width - 1


class LengthHistogram:
    """Count, sum, min, max and the bucket counts of non-negative lengths."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.min: int | None = None
        self.max: int | None = None
        self.buckets: dict[int, int] = {}

    def add(self, length: int) -> None:
        """Adds one length (no numpy: a record at a time stays cheap)."""
        self.count += 1
        self.total += length
        if self.min is None or length < self.min:
            self.min = length
        if self.max is None or length > self.max:
            self.max = length
        if length < EXACT_BELOW:
            bucket = length
        else:
            power = length.bit_length() - 1
            sub = (length >> (power - _SHIFT)) - SUB_BUCKETS
            bucket = EXACT_BELOW + (power - _FIRST_POWER) * SUB_BUCKETS + sub
        self.buckets[bucket] = self.buckets.get(bucket, 0) + 1

    def add_many(self, lengths: np.ndarray | list[int]) -> None:
        """Adds every length, in a few numpy calls."""
        values = np.asarray(lengths, dtype=np.int64)
        if not values.size:
            return
        low, high = int(values.min()), int(values.max())
        self.count += int(values.size)
        self.total += int(values.sum())
        self.min = low if self.min is None else min(self.min, low)
        self.max = high if self.max is None else max(self.max, high)
        counts = np.bincount(bucket_of(values))
        buckets = self.buckets
        for bucket in np.flatnonzero(counts).tolist():
            buckets[bucket] = buckets.get(bucket, 0) + int(counts[bucket])

    def merge(self, other: LengthHistogram) -> None:
        if other.min is None or other.max is None:  # nothing added to `other`
            return
        self.count += other.count
        self.total += other.total
        self.min = other.min if self.min is None else min(self.min, other.min)
        self.max = other.max if self.max is None else max(self.max, other.max)
        for bucket, n in other.buckets.items():
            self.buckets[bucket] = self.buckets.get(bucket, 0) + n

    def rows(self) -> list[list[int]]:
        return [[*bucket_edges(b), n] for b, n in sorted(self.buckets.items())]

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.total,
            "mean": round(self.total / self.count, 6) if self.count else None,
            "histogram": self.rows(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LengthHistogram:
        """The histogram `to_json` gave (trusted: the build's own; a manifest's is checked by
        `tpufeed.sources.built.statistics` first)."""
        out = cls()
        out.count, out.total, out.min, out.max = (
            data["count"],
            data["sum"],
            data["min"],
            data["max"],
        )
        out.buckets = {int(bucket_of(np.array([lo]))[0]): n for lo, _, n in data["histogram"]}
        return out
