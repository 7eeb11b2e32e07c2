"""The ordered stages of a pipeline (map, random_map, filter, batch) and the code that runs them.

`ElementStage.run` processes a whole chunk of records at once, so a worker process can run it
on the positions it is given; it reports which records survived filtering.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tpufeed.errors import TpufeedError, TransformError
from tpufeed.rng import RecordRngs
from tpufeed.stats import StageClock, now


@dataclass(frozen=True)
class MapOp:
    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class RandomMapOp:
    fn: Callable[[Any, Any], Any]
    stream: int  # distinguishes the random_maps of one pipeline


@dataclass(frozen=True)
class FilterOp:
    fn: Callable[[Any], bool]


@dataclass(frozen=True)
class BatchOp:
    batch_size: int
    drop_remainder: bool


ElementOp = MapOp | RandomMapOp | FilterOp
Op = ElementOp | BatchOp

_KINDS = {MapOp: "map", RandomMapOp: "random_map", FilterOp: "filter", BatchOp: "batch"}


def describe_ops(ops: Sequence[Op]) -> list[Any]:
    """A JSON-able description of the stages, for the state fingerprint."""
    out: list[Any] = []
    for op in ops:
        if isinstance(op, BatchOp):
            out.append(["batch", op.batch_size, op.drop_remainder])
        else:
            out.append(_KINDS[type(op)])
    return out


def op_name(op: ElementOp) -> str:
    fn = op.fn
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return f"{_KINDS[type(op)]}({name})"


def stage_names(ops: Sequence[ElementOp], suffix: str = "") -> list[str]:
    """Unique, readable stage names: `map(decode)`, `map(decode)#2`, ..."""
    names: list[str] = []
    for op in ops:
        name = op_name(op) + suffix
        repeat = sum(1 for n in names if n == name or n.startswith(name + "#"))
        names.append(name if not repeat else f"{name}#{repeat + 1}")
    return names


class RecordNames(Protocol):
    """Names records in error messages."""

    def describe(self, record: int) -> str: ...

    def path_of(self, record: int) -> str | None: ...


class ElementStage:
    """Runs element ops over a chunk of records; `names` names a failing record in errors."""

    def __init__(self, ops: Sequence[ElementOp], seed: int, names: RecordNames,
                 clock: StageClock | None = None, on_batches: bool = False):
        self.ops = tuple(ops)
        self.names = names
        self.clock = clock if clock is not None else StageClock()
        self.stage_names = stage_names(self.ops, " on batches" if on_batches else "")
        self._rngs = {op.stream: RecordRngs(seed, op.stream)
                      for op in self.ops if isinstance(op, RandomMapOp)}

    def run(self, elements: list[Any], records: Sequence[int], epoch: int) -> tuple[list[Any], list[int]]:
        """Returns (surviving elements, their offsets in the chunk), in order."""
        offsets = list(range(len(elements)))
        for op, stage in zip(self.ops, self.stage_names):
            i = -1
            started, count = now(), len(elements)
            try:
                if isinstance(op, MapOp):
                    fn = op.fn
                    out = []
                    for i, e in enumerate(elements):
                        out.append(fn(e))
                    elements = out
                elif isinstance(op, RandomMapOp):
                    fn, rngs = op.fn, self._rngs[op.stream]
                    out = []
                    for i, e in enumerate(elements):
                        out.append(fn(e, rngs.for_record(epoch, records[offsets[i]])))
                    elements = out
                else:
                    fn = op.fn
                    kept, kept_offsets = [], []
                    for i, e in enumerate(elements):
                        if fn(e):
                            kept.append(e)
                            kept_offsets.append(offsets[i])
                    elements, offsets = kept, kept_offsets
            except TpufeedError:
                raise
            except Exception as exc:  # noqa: BLE001 - a user function may raise anything
                record = records[offsets[i]] if i >= 0 else None
                raise transform_error(op, exc, record, self.names) from exc
            self.clock.add(stage, now() - started, count)
        return elements, offsets


def transform_error(op: ElementOp | None, exc: BaseException, record: int | None,
                    names: RecordNames) -> TransformError:
    """A TransformError naming the stage, the record and its file, with the traceback."""
    where = names.describe(record) if record is not None else "a batch"
    stage = op_name(op) if op is not None else "a batch stage"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return TransformError(f"{stage} raised {type(exc).__name__}: {exc} (on {where})\n{tb}",
                          record=record, path=names.path_of(record) if record is not None else None,
                          traceback_text=tb)
