"""The ordered stages of a pipeline (map, random_map, filter, batch) and the code that runs them.

`ElementStage.run` processes a whole chunk of records at once, so a worker process can run it
on the positions it is given; it reports which records survived filtering.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tpufeed.errors import TransformError
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
    """Runs element ops over a chunk of records; `names` names a failing record in errors.

    With `tolerant`, a record whose op raises is dropped and its error kept in `skipped` (the
    caller counts and bounds them); otherwise the first failure raises.
    """

    def __init__(self, ops: Sequence[ElementOp], seed: int, names: RecordNames,
                 clock: StageClock | None = None, on_batches: bool = False, tolerant: bool = False):
        self.ops = tuple(ops)
        self.names = names
        self.clock = clock if clock is not None else StageClock()
        self.stage_names = stage_names(self.ops, " on batches" if on_batches else "")
        self.tolerant = tolerant
        self.skipped: list[TransformError] = []
        self._rngs = {op.stream: RecordRngs(seed, op.stream)
                      for op in self.ops if isinstance(op, RandomMapOp)}

    def run(self, elements: list[Any], records: Sequence[int], epoch: int,
            offsets: list[int] | None = None) -> tuple[list[Any], list[int]]:
        """Returns (surviving elements, their offsets in the chunk), in order.

        `records[offsets[i]]` is the record index of `elements[i]` (offsets default to 0..n-1).
        """
        if offsets is None:
            offsets = list(range(len(elements)))
        for op, stage in zip(self.ops, self.stage_names):
            started, count = now(), len(elements)
            if not self.tolerant and not isinstance(op, FilterOp):
                try:  # the fast path; a failure is located by the loop below
                    if isinstance(op, MapOp):
                        elements = [op.fn(e) for e in elements]
                    else:
                        for_record, fn = self._rngs[op.stream].for_record, op.fn
                        elements = [fn(e, for_record(epoch, records[o]))
                                    for e, o in zip(elements, offsets)]
                    self.clock.add(stage, now() - started, count)
                    continue
                except Exception:  # noqa: BLE001 - rerun one by one to name the record
                    pass
            kept: list[Any] = []
            kept_offsets: list[int] = []
            fn = op.fn
            kind = 0 if isinstance(op, MapOp) else 1 if isinstance(op, RandomMapOp) else 2
            rngs = self._rngs.get(getattr(op, "stream", None))
            for element, offset in zip(elements, offsets):
                try:
                    if kind == 0:
                        out = fn(element)
                    elif kind == 1:
                        out = fn(element, rngs.for_record(epoch, records[offset]))
                    elif fn(element):
                        out = element
                    else:
                        continue
                except Exception as exc:  # noqa: BLE001 - a user function may raise anything
                    error = transform_error(op, exc, records[offset], self.names)
                    if not self.tolerant:
                        raise error from exc
                    self.skipped.append(error)
                    continue
                kept.append(out)
                kept_offsets.append(offset)
            elements, offsets = kept, kept_offsets
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
