"""Where each record goes: pure arithmetic behind WriteShards' balanced, deterministic shards.

Every record has a sort key (its content hash, or an order key the caller gives, such as
(input file, line)). Records are ranked by (key, record bytes) over the whole dataset, and
rank p goes to shard `shard_of(p, total, num_shards)`: shards are contiguous runs of the
global order whose sizes differ by at most one. Ranking is distributed: keys are cut into
buckets at approximate quantiles (any monotone cut works; it only decides how the work is
split), bucket sizes give each bucket's first rank, and a bucket is sorted on its own.
The result depends on the multiset of (key, record) only, never on bundles or workers.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Mapping, Sequence

from tpufeed.errors import InvalidArgumentError

__all__ = ["bucket_of", "bucket_starts", "content_key", "order_key", "shard_of", "shard_sizes"]

_U64 = struct.Struct(">Q")


def content_key(record: bytes) -> bytes:
    """The sort key of a record without an order key: a 16-byte BLAKE2b of its bytes."""
    return hashlib.blake2b(record, digest_size=16).digest()


def order_key(key: object) -> bytes:
    """Bytes that sort like `key`: a tuple of non-negative ints (big-endian u64 each) or bytes.

    >>> order_key((1, 2)) < order_key((1, 10)) < order_key((2,))
    True
    """
    if isinstance(key, bytes):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        key = (key,)
    if isinstance(key, tuple) and all(
        isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 2**64 for k in key
    ):
        return b"".join(_U64.pack(k) for k in key)
    raise InvalidArgumentError(
        f"an order key must be bytes or a tuple of non-negative ints below 2**64, got {key!r}"
    )


def bucket_of(key: bytes, splitters: Sequence[bytes]) -> int:
    """The bucket of `key` given sorted cut points: monotone in `key`."""
    return bisect.bisect_right(splitters, key)


def bucket_starts(counts: Mapping[int, int]) -> tuple[dict[int, int], int]:
    """(first global rank of each bucket, total) from the record count of each bucket."""
    starts, total = {}, 0
    for bucket in sorted(counts):
        starts[bucket] = total
        total += counts[bucket]
    return starts, total


def shard_sizes(total: int, num_shards: int) -> list[int]:
    """Record counts of the shards: `total` split into `num_shards` runs differing by at most 1."""
    return [(i + 1) * total // num_shards - i * total // num_shards for i in range(num_shards)]


def shard_of(rank: int, total: int, num_shards: int) -> int:
    """The shard of global rank `rank`: shard i holds ranks [i*total//S, (i+1)*total//S).

    >>> [shard_of(p, 10, 4) for p in range(10)]
    [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]
    """
    if not 0 <= rank < total:
        raise InvalidArgumentError(f"rank {rank} is outside [0, {total})")
    return ((rank + 1) * num_shards - 1) // total
