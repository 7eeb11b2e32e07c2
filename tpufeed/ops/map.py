"""`map(fn)`: fn(element) -> element. `random_map(fn)`: fn(element, rng) -> element, where rng
depends only on (seed, epoch, record, piece), never on hosts, workers or timing; the seed is the
stage's own (`random_map(fn, seed=3)`) or else the pipeline's (its shuffle seed, or 0)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.base import Context, Elements, RecordStage


@dataclass(frozen=True)
class Map(RecordStage):
    """`fn(element)`; a `fn` with a `map_batch(elements) -> elements` method (such as
    `transforms.Tokenize`) gets each chunk's elements in one call instead. A `fn` with an
    `into(element, row)` method (such as `transforms.Normalize`) is called so where it is the
    last stage before a batch stacked as it goes: `row(key, shape, dtype)` is the batch's row
    for that array of the output, to be written in place, or None (`ops.rows.StackedRows.row`).
    The output is the same as `fn(element)`'s."""

    fn: Callable[[Any], Any]
    kind: ClassVar[str] = "map"

    def apply_all(self, elements: Elements, context: Context) -> Elements:
        fn = self.fn
        map_batch = getattr(fn, "map_batch", None)
        if map_batch is None:
            values = [fn(value) for value in elements.values]
        else:
            values = list(map_batch(elements.values))
            if len(values) != len(elements.values):
                raise ValueError(
                    f"{self.name}.map_batch returned {len(values)} elements for "
                    f"{len(elements.values)}"
                )
        return Elements(values, elements.units, elements.ids)

    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        if context.rows is not None:  # the last stage, stacked as it goes: may write in place
            into = getattr(self.fn, "into", None)
            if into is not None:
                return [into(value, context.rows.row)]
        return [self.fn(value)]


@dataclass(frozen=True)
class RandomMap(RecordStage):
    fn: Callable[[Any, Any], Any]
    stream: int  # tells the random_maps of one pipeline apart
    seed: int | None = None  # the stage's own seed; None: the pipeline's
    kind: ClassVar[str] = "random_map"

    def __post_init__(self) -> None:
        if self.seed is not None and (
            not isinstance(self.seed, int) or isinstance(self.seed, bool)
        ):
            raise InvalidArgumentError(f"random_map seed must be None or an int, got {self.seed!r}")

    def describe(self) -> Any:
        return self.kind if self.seed is None else [self.kind, self.seed]

    def apply_all(self, elements: Elements, context: Context) -> Elements:
        fn, for_record = self.fn, context.rngs(self.stream, self.seed).for_record
        epoch, records = context.epoch, context.records
        if elements.ids is None:
            values = [
                fn(value, for_record(epoch, records[unit]))
                for value, unit in zip(elements.values, elements.units)
            ]
        else:
            values = [
                fn(value, for_record(epoch, records[unit], piece))
                for value, unit, piece in zip(elements.values, elements.units, elements.ids)
            ]
        return Elements(values, elements.units, elements.ids)

    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        rngs = context.rngs(self.stream, self.seed)
        return [self.fn(value, rngs.for_record(context.epoch, record, piece))]


@dataclass(frozen=True)
class MapWithIndex(RecordStage):
    """`fn(index, element)`, as Grain's `map_with_index` before a shuffle: `index` is the
    record's place among the `count` records an epoch reads (`first`, `first + step`, ...:
    those a slice before it keeps), plus `count` for each earlier epoch, as Grain's indices go
    on past the first epoch: unique across epochs, and the same on any worker or host count."""

    fn: Callable[[int, Any], Any]
    first: int
    step: int
    count: int
    kind: ClassVar[str] = "map_with_index"

    def describe(self) -> Any:
        return [self.kind, self.first, self.step, self.count]

    def index(self, epoch: int, record: int) -> int:
        return epoch * self.count + (record - self.first) // self.step

    def apply_all(self, elements: Elements, context: Context) -> Elements:
        fn, index, epoch, records = self.fn, self.index, context.epoch, context.records
        values = [
            fn(index(epoch, records[unit]), value)
            for value, unit in zip(elements.values, elements.units)
        ]
        return Elements(values, elements.units, elements.ids)

    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        return [self.fn(self.index(context.epoch, record), value)]
