"""Record order as pure functions of (seed, epoch, position): no state, no I/O.

An epoch is a sequence of *positions* 0..N-1. `permute` maps positions to record indices with a
keyed bijection (a Feistel network with cycle-walking), so any slice of the order costs
O(slice), never an O(N) table. Hosts take positions strided (host h of H takes h, h+H, ...),
so each global step draws its records evenly from the whole epoch order.

Which positions a host takes is order/cursor.py; how a stop continues on another host count,
order/elastic.py.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

from tpufeed.errors import InvalidArgumentError

_ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@functools.lru_cache(maxsize=256)
def _round_keys(seed: int, epoch: int, stream: int) -> tuple[np.uint64, ...]:
    tag = f"tpufeed-order:{seed}:{epoch}" + (f":{stream}" if stream else "")
    digest = hashlib.blake2b(tag.encode(), digest_size=8 * _ROUNDS)
    words = np.frombuffer(digest.digest(), dtype="<u8")
    return tuple(np.uint64(w) for w in words)


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _feistel(x: np.ndarray, half_bits: int, keys: tuple[np.uint64, ...]) -> np.ndarray:
    """Six rounds whose round function is the splitmix64 finaliser of `right ^ key`, computed
    in place (the arrays are small and the calls many: temporaries cost more than the math)."""
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(half_bits)
    left, right = x >> shift, x & mask
    z, t = np.empty_like(x), np.empty_like(x)
    for key in keys:
        np.bitwise_xor(right, key, out=z)
        z *= _GOLDEN
        np.right_shift(z, _S30, out=t)
        z ^= t
        z *= _M1
        np.right_shift(z, _S27, out=t)
        z ^= t
        z *= _M2
        np.right_shift(z, _S31, out=t)
        z ^= t
        z &= mask
        z ^= left
        left, right, z = right, z, left
    left <<= shift
    left |= right
    return left


def permute(positions: np.ndarray, n: int, seed: int, epoch: int, stream: int = 0) -> np.ndarray:
    """Maps epoch positions to record indices: a bijection of [0, n) keyed by (seed, epoch).

    `stream` gives independent permutations for the same (seed, epoch).

    >>> sorted(permute(np.arange(5), 5, seed=0, epoch=0).tolist())
    [0, 1, 2, 3, 4]
    """
    positions = np.asarray(positions, dtype=np.int64)
    if n <= 1 or positions.size == 0:
        return positions.copy()
    if positions.min() < 0 or positions.max() >= n:
        raise InvalidArgumentError(f"positions must lie in [0, {n}), got {positions!r}")
    bits = max(2, (n - 1).bit_length())
    half_bits = (bits + 1) // 2
    keys = _round_keys(seed, epoch, stream)
    limit = np.uint64(n)
    out = _feistel(positions.astype(np.uint64), half_bits, keys)
    # Cycle-walking: the domain is [0, 4^half_bits) < 4n, so a few rounds suffice on average.
    where = np.flatnonzero(out >= limit)
    values = out[where]
    while len(where):
        values = _feistel(values, half_bits, keys)
        inside = values < limit
        out[where[inside]] = values[inside]
        where, values = where[~inside], values[~inside]
    return out.astype(np.int64)


@dataclass(frozen=True)
class Shuffle:
    """A global shuffle (`window=None`), or a windowed one over shards starting at `shard_starts`.

    Windowed: each epoch the shard order is permuted, consecutive groups of `window` shards form
    windows, and the records of a window are permuted among themselves. At any time a host reads
    from about `window` shards, so a cache of that many shards streams the whole epoch.
    """

    seed: int
    window: int | None = None
    shard_starts: tuple[int, ...] = ()


_SHARD_STREAM = -1


def windowed_permute(positions: np.ndarray, shuffle: Shuffle, epoch: int) -> np.ndarray:
    """Record indices of epoch `positions` under a windowed shuffle."""
    starts = np.asarray(shuffle.shard_starts, dtype=np.int64)
    shards = len(starts) - 1
    window = shuffle.window or shards
    counts = np.diff(starts)
    shard_order = permute(np.arange(shards), shards, shuffle.seed, epoch, stream=_SHARD_STREAM)
    ordered_counts = counts[shard_order]
    firsts = np.arange(0, shards, window)
    window_starts = np.concatenate([[0], np.cumsum(np.add.reduceat(ordered_counts, firsts))])
    positions = np.asarray(positions, dtype=np.int64)
    which = np.searchsorted(window_starts, positions, side="right") - 1
    out = np.empty_like(positions)
    for w in np.unique(which).tolist():
        selected = which == w
        members = shard_order[w * window : (w + 1) * window]
        member_starts = np.concatenate([[0], np.cumsum(counts[members])])
        local = permute(
            positions[selected] - window_starts[w],
            int(member_starts[-1]),
            shuffle.seed,
            epoch,
            stream=w + 1,
        )
        j = np.searchsorted(member_starts, local, side="right") - 1
        out[selected] = starts[members[j]] + local - member_starts[j]
    return out


def records_at(n: int, shuffle: Shuffle | None, epoch: int, positions: np.ndarray) -> np.ndarray:
    """Record indices at epoch `positions` (`shuffle=None`: records in stored order)."""
    if shuffle is None:
        return positions
    if shuffle.window is None:
        return permute(positions, n, shuffle.seed, epoch)
    return windowed_permute(positions, shuffle, epoch)
