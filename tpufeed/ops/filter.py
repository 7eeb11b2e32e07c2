"""`filter(fn)`: keeps the elements for which fn(element) is true; counts now depend on data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from tpufeed.ops.base import Context, Elements, RecordStage


@dataclass(frozen=True)
class Filter(RecordStage):
    fn: Callable[[Any], bool]
    kind: ClassVar[str] = "filter"
    changes_count: ClassVar[bool] = True

    def apply_all(self, elements: Elements, context: Context) -> Elements:
        fn = self.fn
        keep = [i for i, value in enumerate(elements.values) if fn(value)]
        if len(keep) == len(elements.values):
            return elements
        values, units, ids = elements.values, elements.units, elements.ids
        return Elements(
            [values[i] for i in keep],
            [units[i] for i in keep],
            None if ids is None else [ids[i] for i in keep],
        )

    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        return [value] if self.fn(value) else []
