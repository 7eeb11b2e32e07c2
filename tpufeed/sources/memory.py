"""An in-memory source over a Python sequence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError, RecordIndexError


class SequenceSource:
    """Random access to the items of a sequence (list, tuple, numpy array, range, ...)."""

    def __init__(self, items: Sequence[Any]):
        if not hasattr(items, "__len__") or not hasattr(items, "__getitem__"):
            raise InvalidArgumentError(
                f"from_sequence needs a sequence with __len__ and __getitem__, got {type(items).__name__}"
            )
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> Any:
        if not -len(self) <= index < len(self):
            raise RecordIndexError(
                f"record index {index} is out of range for a source of {len(self)} records"
            )
        return self._items[index]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        return [self[int(i)] for i in indices]

    def fingerprint(self) -> str:
        return f"{type(self).__name__}[{type(self._items).__name__}:{len(self)}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} items)"
