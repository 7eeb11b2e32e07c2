"""The shard cache a constructor's `cache_dir` / `cache_bytes` ask for."""

from __future__ import annotations

import os
from typing import Any


def cache_for(cache_dir: str | os.PathLike | None, cache_bytes: int | None) -> Any:
    """A ShardCache when the caller set one up; None lets gs:// sources make the default.

    The cache module (and what it imports) loads only when a cache is asked for."""
    if cache_dir is None and cache_bytes is None:
        return None
    from tpufeed.storage.cache import ShardCache

    return ShardCache(cache_dir, cache_bytes)
