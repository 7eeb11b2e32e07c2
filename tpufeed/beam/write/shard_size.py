"""How many shards a build writes: a count from the input size, and a guard on shard size.

A shard is written by one worker, which holds all of its records while it puts them in order;
a shard larger than a worker's memory fails late and expensively (an out-of-memory worker,
retried). The guard refuses such a count before any work, with the numbers; the default count
aims at shards of ~256 MB, in the 100-500 MB that object stores and readers handle well.

>>> suggest_num_shards(10 * 2**30)
40
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tpufeed.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_SHARD_BYTES",
    "TARGET_SHARD_BYTES",
    "check_shard_size",
    "input_bytes",
    "suggest_num_shards",
]

TARGET_SHARD_BYTES = 256 << 20
DEFAULT_MAX_SHARD_BYTES = 2 << 30


def input_bytes(blocks: Sequence[object]) -> int:
    """Bytes of input the blocks hold (each has a `size`)."""
    return sum(block.size for block in blocks)  # type: ignore[attr-defined]


def suggest_num_shards(total_bytes: int, target: int = TARGET_SHARD_BYTES) -> int:
    """Shards of about `target` bytes of input each (at least one)."""
    return max(1, math.ceil(total_bytes / target))


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB" if n < 2**30 else f"{n / 2**30:,.1f} GB"


def check_shard_size(total_bytes: int, num_shards: int, max_shard_bytes: int, output: str) -> None:
    """Refuses `num_shards` when the input would make a shard larger than `max_shard_bytes`
    (input bytes stand for shard bytes: encoded records are of the same order)."""
    per_shard = total_bytes / num_shards
    if per_shard > max_shard_bytes:
        suggested = max(suggest_num_shards(total_bytes), math.ceil(total_bytes / max_shard_bytes))
        raise InvalidArgumentError(
            f"--output {output}: {_mb(total_bytes)} of input in {num_shards} shards is about "
            f"{_mb(per_shard)} a shard, more than the {_mb(max_shard_bytes)} one worker may hold "
            f"while it writes a shard (--max-shard-mb); pass --num-shards {suggested} (about "
            f"{_mb(total_bytes / suggested)} each), or omit --num-shards to get that count, or "
            "raise --max-shard-mb on workers with the memory"
        )
