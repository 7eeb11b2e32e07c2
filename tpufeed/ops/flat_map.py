"""`flat_map(fn)`: fn(element) returns an iterable of zero or more elements, kept in order.

Each output is a *piece* with an id fixed by its record and its place among the outputs, so a
`random_map` after it draws the same numbers for the same piece on any worker or host count.

>>> FlatMap(lambda text: text.split()).apply_one("a b", 0, 0, None)
['a', 'b']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from tpufeed.ops.base import Context, Elements, RecordStage, child_id


@dataclass(frozen=True)
class FlatMap(RecordStage):
    fn: Callable[[Any], Iterable[Any]]
    kind: ClassVar[str] = "flat_map"
    changes_count: ClassVar[bool] = True
    splits: ClassVar[bool] = True

    def apply_all(self, elements: Elements, context: Context) -> Elements:
        parents = elements.ids if elements.ids is not None else [0] * len(elements.values)
        values: list[Any] = []
        units: list[int] = []
        ids: list[int] = []
        for value, unit, parent in zip(elements.values, elements.units, parents):
            outs = self._outputs(value)
            values += outs
            units += [unit] * len(outs)
            ids += [child_id(parent, k) for k in range(len(outs))]
        return Elements(values, units, ids)

    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        return self._outputs(value)

    def _outputs(self, value: Any) -> list[Any]:
        outs = self.fn(value)
        if isinstance(outs, (dict, str, bytes)) or not isinstance(outs, Iterable):
            raise TypeError(
                f"flat_map's function must return an iterable of elements (a list, "
                f"a generator, ...), got a {type(outs).__name__}"
            )
        return list(outs)
