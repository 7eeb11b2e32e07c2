"""The shard cache a constructor's `cache_dir` / `cache_bytes` / `timeout_s` ask for."""

from __future__ import annotations

import os
from typing import Any


def cache_for(
    cache_dir: str | os.PathLike | None, cache_bytes: int | None, timeout_s: float | None = None
) -> Any:
    """A ShardCache when the caller set one up; None lets gs:// sources make the default.

    `timeout_s` bounds every GCS call made through it, retries included (`RetryPolicy.within`);
    None keeps the default bound. The cache module (and what it imports) loads only when a
    cache is asked for."""
    if cache_dir is None and cache_bytes is None and timeout_s is None:
        return None
    from tpufeed.storage.cache.shard_cache import ShardCache
    from tpufeed.storage.retry import RetryPolicy

    return ShardCache(cache_dir, cache_bytes, retry=RetryPolicy.within(timeout_s))
