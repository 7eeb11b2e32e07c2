"""A uniform face over any record source: batched reads, record names, a fingerprint.

A source is any object with `__len__` and `__getitem__(int)` (the Grain protocol). Optional:
`__getitems__(indices)` for batched reads, `locate(index) -> (path, local index)`,
`fingerprint()`, `will_read(indices)` (the records the plan needs next, in order, for
read-ahead), `shard_stamps()` (what a state remembers of its files) and `file_versions()` (each
file's whole identity, for what is derived from it); the view supplies fallbacks for what is
missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError, SourceError, TpufeedError
from tpufeed.order.state import ShardStamp


class SourceView:
    """`foreign`: a user's source (`Dataset.from_source`), whose `__getitems__` gets a list of
    ints as the Grain and PyTorch protocols say (TFDS's sources test `if not keys`, which an
    array refuses); tpufeed's own sources take the plan's index array as it is."""

    def __init__(self, source: Any, foreign: bool = False):
        if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise InvalidArgumentError(
                f"a source needs __len__ and __getitem__(int); {type(source).__name__} lacks them"
            )
        self.source = source
        self._getitems = getattr(source, "__getitems__", None)
        self._foreign = foreign
        self._locate = getattr(source, "locate", None)
        self._will_read = getattr(source, "will_read", None)

    def __len__(self) -> int:
        try:
            return len(self.source)
        except TpufeedError:
            raise
        except Exception as exc:
            raise InvalidArgumentError(
                f"len() of the source {type(self.source).__name__} failed: "
                f"{type(exc).__name__}: {exc}; a source's __len__ must "
                "return its record count, a non-negative int"
            ) from exc

    def read(self, indices: np.ndarray) -> list[Any]:
        """Reads records at `indices` in one call where the source allows it."""
        try:
            if self._getitems is not None:
                return list(self._getitems(indices.tolist() if self._foreign else indices))
            return [self.source[i] for i in indices.tolist()]
        except TpufeedError:
            raise
        except Exception as exc:
            first = int(indices[0]) if len(indices) else -1
            raise SourceError(
                f"reading records {_span(indices)} from {type(self.source).__name__} "
                f"failed: {type(exc).__name__}: {exc}",
                record=first,
            ) from exc

    def will_read(self, indices: np.ndarray) -> None:
        """Tells the source which records come next, in order (a hint for read-ahead)."""
        if self._will_read is not None:
            self._will_read(indices)

    def describe(self, record: int) -> str:
        if self._locate is not None:
            path, local = self._locate(record)
            return f"{path} record {local} (global record {record})"
        return f"record {record}"

    def path_of(self, record: int) -> str | None:
        return self._locate(record)[0] if self._locate is not None else None

    def shard_stamps(self) -> tuple[ShardStamp, ...]:
        """What a state remembers of each file of the source (none for a source without)."""
        stamps = getattr(self.source, "shard_stamps", None)
        return tuple(stamps()) if callable(stamps) else ()

    def file_versions(self) -> tuple[str, ...]:
        """Each file of the source and its whole identity (inode included: what a derived file
        is keyed by); a source without `file_versions` gives what `shard_stamps` knows."""
        versions = getattr(self.source, "file_versions", None)
        if callable(versions):
            return tuple(versions())
        return tuple(":".join(map(str, stamp)) for stamp in self.shard_stamps())

    def fingerprint(self) -> str:
        fingerprint = getattr(self.source, "fingerprint", None)
        if callable(fingerprint):
            return str(fingerprint())
        kind = type(self.source)
        return f"{kind.__module__}.{kind.__qualname__}:{len(self)}"


def _span(indices: Sequence[int] | np.ndarray) -> str:
    values = [int(i) for i in indices[:4]]
    more = ", ..." if len(indices) > 4 else ""
    return "[" + ", ".join(map(str, values)) + more + "]"
