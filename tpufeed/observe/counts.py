"""Process-wide counters: what storage, the cache and the workers count, by name.

`count("cache_hits")` from any thread. A worker's increments travel to the parent with its
answers (`drain`, then `add` there), so the parent's tally is the host's. A run reports the
difference between two `snapshot()`s: its share, whatever ran before it in the process.

Names, with what counts them:
    bytes_read        bytes read from shard files, local or remote (sources)
    cache_hits        reads served by the shard cache from local disk (storage.cache)
    cache_misses      reads that had to fetch a shard first
    cache_evictions   shards evicted to stay within the cache's size
    cache_bytes       bytes fetched into the cache
    gcs_requests      requests sent to GCS (storage.gcs)
    gcs_retries       of those, retries after a transient failure
    gcs_bytes         bytes received from GCS
    worker_restarts   worker processes started again after one died
    agreements        steps agreed with the other hosts
"""

from __future__ import annotations

import threading
from collections import Counter

NAMES = (
    "bytes_read",
    "cache_hits",
    "cache_misses",
    "cache_evictions",
    "cache_bytes",
    "gcs_requests",
    "gcs_retries",
    "gcs_bytes",
    "worker_restarts",
    "agreements",
)

_lock = threading.Lock()
_total: Counter[str] = Counter()  # since the process started (a worker's: since it forked)
_unshipped: Counter[str] = Counter()  # a worker's, since its last answer


def count(name: str, n: int = 1) -> None:
    """Adds `n` to the counter `name` (one of NAMES)."""
    with _lock:
        _total[name] += n
        _unshipped[name] += n


def snapshot() -> dict[str, int]:
    """Every counter now (the ones never counted are 0)."""
    with _lock:
        return {name: _total[name] for name in NAMES} | dict(_total)


def since(before: dict[str, int]) -> dict[str, int]:
    """What was counted after `before` (a `snapshot()`)."""
    now = snapshot()
    return {name: now[name] - before.get(name, 0) for name in now}


def drain() -> dict[str, int]:
    """The increments since the last drain (what a worker ships with an answer)."""
    with _lock:
        out = dict(_unshipped)
        _unshipped.clear()
        return out


def add(increments: dict[str, int]) -> None:
    """A worker's increments, counted in this process (the parent's), not shipped again."""
    with _lock:
        _total.update(increments)


def forget_inherited() -> None:
    """In a forked worker: the parent's counts are the parent's (nothing of them to ship)."""
    with _lock:
        _unshipped.clear()
