"""Every stage a pipeline can hold: where each may stand, and how stream stages start.

Record stages (`Map`, `RandomMap`, `MapWithIndex`, `Filter`, `FlatMap`) act on each element on
its own, so any process can run them on any chunk of records. Stream stages (`Pack`, `Batch`)
see the elements in order and run in the process that hands items to the consumer; record
stages after them act on whole items. A new stage is a file of this package, an entry here, and a `Dataset` method.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tpufeed.errors import InvalidArgumentError, StateError
from tpufeed.ops.base import Counters, RecordStage, StreamStage
from tpufeed.ops.batch import Batch, Batcher
from tpufeed.ops.cache import Cache, cache_key
from tpufeed.ops.flat_map import FlatMap
from tpufeed.ops.map import MapWithIndex, RandomMap
from tpufeed.ops.pack import Pack, Packer
from tpufeed.ops.pack_state import PackState, SavedPack
from tpufeed.ops.unbatched import Unbatched
from tpufeed.storage.record_cache import RecordFiles

Stage = RecordStage | Pack | Batch


def check_next(stages: Sequence[Stage], stage: Stage) -> None:
    """Raises unless `stage` may follow `stages`, saying where it belongs."""
    batch = any(isinstance(s, Batch) for s in stages)
    pack = any(isinstance(s, Pack) for s in stages)
    if isinstance(stage, MapWithIndex) and (batch or pack):
        raise InvalidArgumentError(
            "map_with_index must come before pack and batch: its index is a record's, and "
            "rows and batches hold several records"
        )
    if isinstance(stage, FlatMap) and (batch or pack):
        raise InvalidArgumentError(
            "flat_map must come before pack and batch: it makes "
            "elements, and rows and batches are cut from elements"
        )
    if isinstance(stage, Pack) and (batch or pack):
        raise InvalidArgumentError(
            "pack comes once, before batch: it makes the rows that batch stacks"
        )
    if isinstance(stage, Batch) and batch:
        raise InvalidArgumentError("batch is already set; a pipeline batches once")
    if isinstance(stage, Batch) and stage.pad and pack:
        raise InvalidArgumentError("batch after pack takes no pad: packed rows have one length")


def cache_stage(
    directory: Any, max_bytes: Any, source: Any, stages: Sequence[Stage], key: Any = None
) -> Cache:
    """The `cache()` after `stages` over `source`; raises where it cannot replay them."""
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise InvalidArgumentError(f"cache directory must be a path, got {directory!r}")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise InvalidArgumentError(f"cache max_bytes must be a positive int, got {max_bytes!r}")
    if key is not None and not (isinstance(key, str) and key):
        raise InvalidArgumentError(
            f"cache key must be a non-empty str that you change when the code changes "
            f'(key="v2"), or None to key by the code itself; got {key!r}'
        )
    for stage in stages:
        why = _not_replayable(stage)
        if why:
            raise InvalidArgumentError(f"cache() cannot come after {stage_label(stage)}: {why}")
    records = tuple(s for s in stages if isinstance(s, RecordStage))
    files = RecordFiles(os.fspath(directory), cache_key(source, records, key), max_bytes)
    return Cache(files, any(stage.splits for stage in records))


def _not_replayable(stage: Stage) -> str | None:
    if isinstance(stage, RandomMap):
        return (
            "it draws new numbers every epoch, and the cache would replay the first epoch's; "
            "put cache() before it (after the deterministic stages: decode, resize)"
        )
    if isinstance(stage, MapWithIndex):
        return (
            "its index counts on over the epochs (epoch e adds e times the records of an "
            "epoch, as Grain's), and the cache would replay the first epoch's; put cache() "
            "before it"
        )
    if isinstance(stage, (Batch, Pack)):
        return "the cache keeps each record's elements; put cache() before pack and batch"
    if isinstance(stage, Cache):
        return "a pipeline caches once"
    return None


def stage_label(stage: Stage) -> str:
    """How a stage shows in a pipeline's repr: its name, with batch's and pack's settings."""
    if isinstance(stage, Batch):
        return f"batch({stage.batch_size}, drop_remainder={stage.drop_remainder})"
    if isinstance(stage, Pack):
        method = "" if stage.method == "first_fit" else f", method={stage.method!r}"
        return f"pack({dict(stage.lengths)}, open_rows={stage.open_rows}{method})"
    return stage.name


def split(
    stages: Sequence[Stage],
) -> tuple[tuple[RecordStage, ...], Pack | None, Batch | None, tuple[RecordStage, ...]]:
    """(record stages before pack and batch, pack, batch, record stages after them)."""
    pack = next((s for s in stages if isinstance(s, Pack)), None)
    batch = next((s for s in stages if isinstance(s, Batch)), None)
    at = [list(stages).index(s) for s in (pack, batch) if s is not None]
    head_end = at[0] if at else len(stages)
    tail_start = at[-1] + 1 if at else len(stages)
    if pack is not None and tail_start - head_end != len(at):
        raise InvalidArgumentError(
            "nothing can come between pack and batch: map the rows "
            "after batch, or the elements before pack"
        )
    head = tuple(s for s in stages[:head_end] if isinstance(s, RecordStage))
    tail = tuple(s for s in stages[tail_start:] if isinstance(s, RecordStage))
    return head, pack, batch, tail


def stream_stage(pack: Pack | None, batch: Batch | None, counters: Counters) -> StreamStage:
    """The running stream stage of a plan: pack (with the batch after it), batch, or none."""
    if pack is not None:
        return Packer(pack, batch, counters)
    if batch is not None:
        return Batcher(batch, counters)
    return Unbatched()


def state_key(pack: Pack | None, batch: Batch | None) -> str:
    """The key under which a plan's stream stage writes what it holds into a state."""
    return Packer.key if pack is not None else Batcher.key if batch is not None else Unbatched.key


def idle_stage_state(pack: Pack | None) -> dict[str, PackState]:
    """What a plan's stream stage writes into a state before it holds anything (at the start,
    and after a restore that left it nothing): the part every later state has, empty."""
    return {Packer.key: PackState((), (), 0)} if pack is not None else {}


def read_stage_state(key: str, value: Any, arity: int) -> Any:
    """The part of a saved state that the stream stage `key` wrote, read and checked."""
    if key == Packer.key:
        return SavedPack.from_dict(value, arity)
    raise StateError(f"iterator state field {key!r}: this stage holds nothing between items")
