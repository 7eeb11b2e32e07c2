"""A TFDS-prepared dataset's split, or slices of splits, read in place by index.

Record i of the source is the i-th record `tfds.data_source(name, split=...)` gives (and, for
TFRecord files, the i-th that `tfds.load(name, split=..., shuffle_files=False)` gives): the
spans TFDS's split string selects (`tpufeed.sources.tfds.splits`), shard by shard, each
decoded with the dataset's own features (`tpufeed.sources.tfds.features`). The shard files are
read by the ArrayRecord and TFRecord readers, local or through the shard cache, each file
inside the dataset's folder; a file whose record count differs from what `dataset_info.json`
says is refused by name.

>>> source = TFDSSource("mnist", "train[:10%]", "~/tensorflow_datasets")  # doctest: +SKIP
>>> source[0]["label"]  # doctest: +SKIP
np.int64(4)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError
from tpufeed.order.state import ShardStamp
from tpufeed.sources.sharded import RecordFile, ShardedSource, checked_indices
from tpufeed.sources.tfds.features import ExampleDecoder
from tpufeed.sources.tfds.metadata import PreparedDataset, prepared
from tpufeed.sources.tfds.splits import Span, shard_spans
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.retry import RetryPolicy

__all__ = ["TFDSSource"]


class TFDSSource:
    """The records `split` selects of the prepared dataset `name` under `data_dir` (a folder,
    or gs:// / s3:// through `cache`), decoded into dicts of numpy values."""

    def __init__(
        self,
        name: str,
        split: str,
        data_dir: str | os.PathLike,
        cache: ShardCache | None = None,
        index_dir: str | os.PathLike | None = None,
    ):
        self.name, self.split = name, split
        dataset = prepared(name, os.fspath(data_dir), cache.retry if cache else RetryPolicy())
        self.folder = dataset.folder
        spans = shard_spans(split, dataset.shard_lengths)
        shards = list(dict.fromkeys((s.split, s.shard) for s in spans))  # each file once
        if dataset.objects and cache is None:  # one cache for every remote shard
            cache = ShardCache()
        files = [_record_file(dataset, where, cache, index_dir) for where in shards]
        self.records: ShardedSource[Any] = ShardedSource(files)
        _check_counts(dataset, shards, self.records)
        self._decoder = ExampleDecoder(dataset.features, dataset.folder)
        file_of = {where: i for i, where in enumerate(shards)}
        takes = np.array([s.take for s in spans], dtype=np.int64)
        self._starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(takes)])
        file_starts = np.array(self.records.shard_starts[:-1], dtype=np.int64)
        self._first = np.array(
            [file_starts[file_of[(s.split, s.shard)]] + s.skip for s in spans], dtype=np.int64
        )
        self._spans: list[Span] = spans

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        n = len(self)
        idx = checked_indices(
            indices, n, lambda bad: f"record index {bad} is out of range for {self._named(n)}"
        )
        if not idx.size:
            return []
        inner = self._inner(idx)
        records = self.records.__getitems__(inner)
        decode, locate = self._decoder.decode, self.records.locate
        return [decode(record, i, locate) for record, i in zip(records, inner.tolist())]

    def _inner(self, idx: np.ndarray) -> np.ndarray:
        """The records of the shard files (`self.records`) that records `idx` are."""
        span = np.searchsorted(self._starts, idx, side="right") - 1
        return self._first[span] + (idx - self._starts[span])

    def will_read(self, indices: np.ndarray) -> None:
        """The records the plan reads next: their shards are fetched ahead (gs://, s3://)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        self.records.will_read(self._inner(idx) if idx.size else idx)

    def locate(self, index: int) -> tuple[str, int]:
        """(shard file, record within it) of record `index`."""
        checked_indices([index], len(self), lambda bad: f"record {bad} is out of range")
        return self.records.locate(int(self._inner(np.array([index], np.int64))[0]))

    def shard_stamps(self) -> list[ShardStamp]:
        return self.records.shard_stamps()

    def file_versions(self) -> list[str]:
        return self.records.file_versions()

    def fingerprint(self) -> str:
        spans = ",".join(f"{s.split}/{s.shard}+{s.skip}:{s.take}" for s in self._spans)
        return f"TFDSSource[{self.records.fingerprint()}|{spans}]"

    def close(self) -> None:
        self.records.close()

    def _named(self, n: int) -> str:
        return f"{self.name} split {self.split!r} ({n} records)"

    def __repr__(self) -> str:
        return f"TFDSSource({self.name!r}, {self.split!r}, {len(self)} records, {self.folder})"


def _record_file(
    dataset: PreparedDataset,
    where: tuple[str, int],
    cache: ShardCache | None,
    index_dir: str | os.PathLike | None,
) -> RecordFile:
    """The reader of shard `where` (split, shard index): ArrayRecord or TFRecord, local (inside
    the dataset's folder) or through the shard cache."""
    from tpufeed.sources.array_record.file import ArrayRecordFile
    from tpufeed.sources.tfrecord.source import TFRecordFile

    path = dataset.files[where[0]][where[1]]
    remote = None
    if dataset.objects:
        obj = dataset.objects.get(path)
        if obj is None:
            raise CorruptDataError(
                f"{path}: shard {where[1]} of split {where[0]!r}, named by "
                f"{dataset.folder}/dataset_info.json, is missing",
                path=path,
            )
        remote = RemoteFile(obj, cache or ShardCache())  # the caller's, when there is one
        if dataset.file_format == "array_record" and not remote.cached:
            raise InvalidArgumentError(
                f"{path}: ArrayRecord files are read from local copies, so they need a shard "
                "cache; cache_bytes=0 leaves none (TFRecord files are read by ranges without)"
            )
    if dataset.file_format == "array_record":
        return ArrayRecordFile(path, remote, root=None if remote else dataset.folder)
    return TFRecordFile(path, index_dir, remote, root=None if remote else dataset.folder)


def _check_counts(
    dataset: PreparedDataset, shards: list[tuple[str, int]], records: ShardedSource[Any]
) -> None:
    """Each shard file holds the records `dataset_info.json` says it does."""
    for (split, shard), f, start, end in zip(
        shards, records.files, records.shard_starts, records.shard_starts[1:]
    ):
        said = dataset.shard_lengths[split][shard]
        if end - start != said:
            raise CorruptDataError(
                f"{f.path}: {end - start} records, where {dataset.folder}/dataset_info.json "
                f"says shard {shard} of split {split!r} holds {said} (cut or replaced?)",
                path=f.path,
            )
