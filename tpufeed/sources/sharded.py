"""Several record files addressed as one source: a global index runs through files in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from tpufeed.errors import InvalidArgumentError, RecordIndexError


class RecordFile(Protocol):
    """One file of records, read by local index. Picklable: handles reopen lazily."""

    path: str

    def __len__(self) -> int: ...

    def read(self, indices: np.ndarray) -> list[bytes]:
        """Returns the records at `indices` (local, int64, any order), in that order."""
        ...

    def close(self) -> None: ...


class ShardedSource:
    """Records of `files` as one sequence: `len` is the sum, index i falls in file order."""

    def __init__(self, files: Sequence[RecordFile]):
        if not files:
            raise InvalidArgumentError("a sharded source needs at least one file")
        self.files = list(files)
        counts = np.array([len(f) for f in self.files], dtype=np.int64)
        self._starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def shard_starts(self) -> tuple[int, ...]:
        """Global index of each file's first record, then the total: what windowed shuffles use."""
        return tuple(int(s) for s in self._starts)

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """Batched read: one `read` call per file touched, results in the order asked."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise RecordIndexError(f"record index {bad} is out of range for a source of {n} records")
        file_ids = np.searchsorted(self._starts, idx, side="right") - 1
        if idx.size and (file_ids == file_ids[0]).all():
            f = int(file_ids[0])
            return self.files[f].read(idx - self._starts[f])
        out: list = [None] * idx.size
        for f in np.unique(file_ids):
            where = np.flatnonzero(file_ids == f)
            records = self.files[f].read(idx[where] - self._starts[f])
            for i, record in zip(where.tolist(), records):
                out[i] = record
        return out

    def locate(self, index: int) -> tuple[str, int]:
        """Returns (path, index within that file) of global record `index`."""
        if not 0 <= index < len(self):
            raise RecordIndexError(
                f"record index {index} is out of range for a source of {len(self)} records")
        f = int(np.searchsorted(self._starts, index, side="right") - 1)
        return self.files[f].path, int(index - self._starts[f])

    def describe(self, index: int) -> str:
        path, local = self.locate(index)
        return f"{path} record {local} (global record {index})"

    def fingerprint(self) -> str:
        import os
        shards = ",".join(f"{os.path.basename(f.path)}:{len(f)}" for f in self.files)
        return f"{type(self).__name__}[{shards}]"

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.files)} files, {len(self)} records)"
