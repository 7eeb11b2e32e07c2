"""tf.data's names where tpufeed's differ: what a tf.data user's call means here, and the words
that refuse one tpufeed cannot honour as written (docs/coming-from/tf-data.md has the table).

tf.data's spellings that work as written: `prefetch(tf.data.AUTOTUNE)` (-1: "auto"),
`options()` (the settings in force), `with_options(...)` (tpufeed's `Options`),
`shard(num_shards=n, index=i)`. Those refused here name the difference instead of guessing.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KEEP",
    "UNBOUNDED_SKIPS",
    "Keep",
    "foreign_options",
    "memory_cache",
    "swapped_shard",
]


class Keep:
    """The default of each `options(...)` argument: that setting stays as it is."""

    def __repr__(self) -> str:
        return "unchanged"


KEEP = Keep()

UNBOUNDED_SKIPS = (
    "ignore_errors() needs max_errors: tpufeed skips at most that many bad records per "
    "iterator, counts them (it.stats().errors), logs them, and raises at the next one; "
    "tf.data's ignore_errors() skips every error without bound. Write ignore_errors(1000), "
    "or a bound that fits your data"
)


def memory_cache(directory: Any, max_bytes: Any) -> str | None:
    """Why `cache(directory, max_bytes)` as a tf.data user writes it cannot run (None: it can)."""
    if directory is None or directory == "":
        return (
            f"cache() needs a directory and max_bytes, got directory={directory!r}: tpufeed "
            "keeps each record's elements on disk, bounded, keyed by the code that made them, "
            "and replays them in later epochs and runs; tf.data's cache() keeps the first epoch "
            "in memory without bound. Write cache('/local/ssd/cache', max_bytes=100 << 30)"
        )
    if max_bytes is None:
        return (
            f"cache({directory!r}) needs max_bytes: the most the cache may hold on disk "
            f"(tf.data's cache(filename) has no bound). Write cache({directory!r}, "
            "max_bytes=100 << 30)"
        )
    return None


def swapped_shard(index: int, count: int) -> str:
    """The message for `shard(a, b)` with a >= b: most likely tf.data's order, (num_shards,
    index), read as tpufeed's (index, count)."""
    return (
        f"shard index {index} is not below shard count {count}: tpufeed's order is "
        f"shard(index, count). tf.data's shard(num_shards={index}, index={count}) is "
        f"shard({count}, {index}), or shard(num_shards={index}, index={count}) by name"
    )


def foreign_options(options: Any) -> str:
    """Why `with_options(options)` refuses an object that is not tpufeed's `Options`."""
    kind = f"{type(options).__module__}.{type(options).__qualname__}"
    if kind.startswith("tensorflow"):
        return (
            "with_options takes tpufeed's Options (another pipeline's options()), not a "
            "tf.data.Options: autotune.ram_budget is options(ram_budget_bytes=...); "
            "deterministic has no setting (every tpufeed pipeline is deterministic); "
            "threading.private_threadpool_size is workers(n); autotune is workers('auto') and "
            "prefetch('auto')"
        )
    return f"with_options takes tpufeed's Options (another pipeline's options()), got {kind}"
