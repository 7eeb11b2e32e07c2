"""Process-wide counters: what storage, the cache and the workers count, by name.

`count("cache_hits")` from any thread. A worker's increments travel to the parent with its
answers (`drain`, then `add` there), so the parent's tally is the host's. A run reports the
difference between two `snapshot()`s: its share, whatever ran before it in the process.

Names, with what counts them (each once per request, shard or chunk, never per record):
    bytes_read        bytes of records read from shard files, local or gs:// (sources:
                      ArrayRecord and TFRecord records; Parquet row groups as stored)
    cache_hits        opens of a gs:// shard served by the shard cache from local disk
                      (storage.cache.shard_cache)
    cache_misses      opens that had to wait for the shard to be fetched first
    cache_evictions   shards evicted to stay within the cache's byte limit
    cache_bytes       bytes fetched into the cache (whole shards, read-ahead included)
    gcs_requests      GCS requests sent (storage.retry: every attempt of a listing, a metadata
                      read or a byte range)
    gcs_retries       of those, retries after a transient failure
    gcs_bytes         bytes of object data received from GCS (storage.stores.gcs)
    s3_requests       the same three for S3 and S3-compatible stores (storage.stores.s3)
    s3_retries
    s3_bytes
    http_requests     the same three for files on web servers (http://, https://) and the
    http_retries      Hugging Face Hub (hf://) (storage.stores.web, storage.stores.hub)
    http_bytes
    workers_started   worker processes started (run.workers.pool)
    workers_lost      workers found dead or stopped: the run then ends with WorkerError
                      (a worker is never restarted; a new iterator starts new ones)
    agreements        steps agreed with the other hosts (run.hosts.uneven)
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
    "s3_requests",
    "s3_retries",
    "s3_bytes",
    "http_requests",
    "http_retries",
    "http_bytes",
    "workers_started",
    "workers_lost",
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
