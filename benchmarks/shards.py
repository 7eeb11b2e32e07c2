"""The raw array_record reader over the benchmark shards: a batch of global indices at a time.

This is the "limit" reader (and what the PyTorch Dataset reads through): plain
`ArrayRecordReader`s, no checks, no decode, their fastest access path for these files.
Picklable: readers reopen in each process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

# readahead 0 is required for random access (the default is ~140x slower); parallelism 0 reads
# in the calling thread, the faster choice for batches of small records.
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


class ShardReader:
    """Records of `paths` (with `counts` records each) as one sequence, read a batch at a time."""

    def __init__(self, paths: Sequence[str], counts: Sequence[int]):
        self.paths = list(paths)
        self.counts = list(counts)
        self._starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._readers: list[Any] | None = None

    def __len__(self) -> int:
        return int(self._starts[-1])

    def read(self, indices: np.ndarray | Sequence[int]) -> list[bytes]:
        """The records at global `indices`, in that order.

        One `read(i, i + 1)` per record: for these files (one small record per chunk) it is
        2-3x faster than array_record's batched `read(list)`, whose cost grows with the number
        of records in the file.
        """
        if self._readers is None:
            self._readers = self._open()
        idx = np.asarray(indices, dtype=np.int64)
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[shard_of]
        readers = self._readers
        return [readers[s].read(i, i + 1)[0] for s, i in zip(shard_of.tolist(), local.tolist())]

    def close(self) -> None:
        for reader in self._readers or ():
            reader.close()
        self._readers = None

    def _open(self) -> list[Any]:
        return [ArrayRecordReader(path, READER_OPTIONS) for path in self.paths]

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths, "counts": self.counts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["paths"], state["counts"])
