"""Where `WriteShards(keyed=True)` cuts its caller-given order keys into buckets: at evenly
spaced keys of a deterministic sample, with no step that sees every key on one worker.

A bucket is what one worker sorts in memory; the shards are then cut by rank, from the
buckets' counts (see `ranking`), so the cut points decide only how even the buckets are,
never what a shard holds. The keys are counted (a combine: one integer per bundle reaches the
last merge); a key is in the sample when a hash of its bytes falls in the first
1/`every` of the hash range, `every` chosen for about `SAMPLES_PER_BUCKET` keys a bucket;
the sample is sorted on one worker and every `len(sample) / buckets`-th key is a cut point.
At 1e9 records in 10,000 shards (40,000 buckets) the sample is ~1.3M keys (~30 MB), sorted in
seconds. Beam's `ApproximateQuantiles.Globally`, which this replaced, sized its summary for a
rank error of 1/40,001: buffers of 244,141 keys, so every bundle's partial summary held all
of its keys and its last merge took all 1e9 on one worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["SAMPLES_PER_BUCKET", "cut_points", "in_sample", "sample_every"]

SAMPLES_PER_BUCKET = 32  # a bucket's size then varies by about ±18% (1/sqrt(32))


def sample_every(total: int, buckets: int) -> int:
    """One key in `every` (by hash) gives about `SAMPLES_PER_BUCKET` keys a bucket."""
    return max(1, total // (buckets * SAMPLES_PER_BUCKET))


def in_sample(key: bytes, every: int) -> bool:
    """Whether `key` is in the sample: decided by its bytes alone, so equal keys agree."""
    if every == 1:
        return True
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "little") % every == 0


def cut_points(sample: Sequence[bytes], buckets: int) -> list[bytes]:
    """`buckets - 1` sorted cut points at evenly spaced keys of the sample (fewer when the
    sample holds fewer keys; none for an empty one)."""
    keys = sorted(sample)
    if not keys:
        return []
    return sorted({keys[len(keys) * i // buckets] for i in range(1, buckets)})
