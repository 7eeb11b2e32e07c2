"""The sources behind `Dataset`'s constructors, each opened with its shard cache and viewed.

One function a constructor: `from_array_record` opens `array_record(...)`, `Dataset.open` a
`built_dataset(...)`, and so on. A format's module (and what it imports: pyarrow, the GCS
client) loads only when a source of that format is opened, so `import tpufeed` stays light.
`cache_dir`, `cache_bytes` and `timeout_s` ask for a shard cache (`tpufeed.storage.settings`);
without them, a source with gs:// files makes the default one. `timeout_s` bounds each GCS call
of the source (listing, metadata, ranges, downloads), retries included.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.view import SourceView
from tpufeed.storage.local import PathsLike
from tpufeed.storage.settings import cache_for

__all__ = [
    "any_source",
    "array_record",
    "built_dataset",
    "huggingface",
    "mds",
    "parquet",
    "sequence",
    "tfds",
    "tfrecord",
    "webdataset",
]


def any_source(source: Any) -> SourceView:
    """Any object with `__len__` and `__getitem__(int)`."""
    return SourceView(source, foreign=True)


def sequence(items: Sequence[Any]) -> SourceView:
    """The items of an in-memory sequence."""
    from tpufeed.sources.memory import SequenceSource

    return SourceView(SequenceSource(items))


def array_record(
    paths: PathsLike,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    timeout_s: float | None = None,
) -> SourceView:
    """ArrayRecord files (a path, a glob or a list, local or gs://)."""
    from tpufeed.sources.array_record.source import ArrayRecordSource

    return SourceView(ArrayRecordSource(paths, cache=cache_for(cache_dir, cache_bytes, timeout_s)))


def tfrecord(
    paths: PathsLike,
    index_dir: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    timeout_s: float | None = None,
) -> SourceView:
    """TFRecord files, read by an offset index kept in `index_dir`."""
    from tpufeed.sources.tfrecord.source import TFRecordSource

    cache = cache_for(cache_dir, cache_bytes, timeout_s)
    return SourceView(TFRecordSource(paths, index_dir=index_dir, cache=cache))


def tfds(
    name: str,
    split: str,
    data_dir: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    timeout_s: float | None = None,
) -> SourceView:
    """A TFDS-prepared dataset's split (slices included), decoded with its own features."""
    from tpufeed.sources.tfds.data_dir import default_data_dir
    from tpufeed.sources.tfds.source import TFDSSource

    cache = cache_for(cache_dir, cache_bytes, timeout_s)
    return SourceView(TFDSSource(name, split, data_dir or default_data_dir(), cache))


def parquet(
    paths: PathsLike,
    columns: Sequence[str] | None,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    decoded_bytes: int,
    timeout_s: float | None = None,
) -> SourceView:
    """The rows of Parquet files, `decoded_bytes` of decoded row groups kept per process."""
    from tpufeed.sources.parquet.source import ParquetSource

    cache = cache_for(cache_dir, cache_bytes, timeout_s)
    return SourceView(ParquetSource(paths, columns, cache, decoded_bytes))


def huggingface(
    dataset: Any,
    columns: Sequence[str] | None,
    cache_dir: str | os.PathLike | None = None,
    cache_bytes: int | None = None,
    timeout_s: float | None = None,
) -> SourceView:
    """The rows of a Hugging Face `datasets.Dataset`, read as Arrow; of an `IterableDataset`,
    the Parquet files it streams, read in place (`tpufeed.sources.huggingface_files`)."""
    if type(dataset).__name__ == "IterableDataset":
        from tpufeed.sources.huggingface_files import kept_columns, parquet_files

        files, kept = parquet_files(dataset)
        wanted = kept_columns(kept, columns)
        return parquet(files, wanted, cache_dir, cache_bytes, 256 << 20, timeout_s)
    given = {"cache_dir": cache_dir, "cache_bytes": cache_bytes, "timeout_s": timeout_s}
    if any(value is not None for value in given.values()):
        named = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)
        raise InvalidArgumentError(
            f"from_huggingface: {named} apply to the files under a streaming IterableDataset; "
            f"a {type(dataset).__name__} is read from its own Arrow files, with no shard cache"
        )
    from tpufeed.sources.huggingface import HuggingFaceSource

    return SourceView(HuggingFaceSource(dataset, columns))


def built_dataset(
    path: str | os.PathLike,
    verify: bool,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    timeout_s: float | None = None,
) -> SourceView:
    """A dataset built by `tpufeed build`: a folder or its manifest.json, local or gs://."""
    from tpufeed.sources.built.manifest import ManifestSource

    cache = cache_for(cache_dir, cache_bytes, timeout_s)
    return SourceView(ManifestSource(path, verify=verify, cache=cache))


def webdataset(
    paths: PathsLike,
    decode: bool,
    index_dir: str | os.PathLike | None,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    timeout_s: float | None = None,
) -> SourceView:
    """WebDataset tar shards, read by a sample index kept in `index_dir`."""
    from tpufeed.sources.webdataset.tar import WebDatasetSource

    cache = cache_for(cache_dir, cache_bytes, timeout_s)
    return SourceView(WebDatasetSource(paths, index_dir=index_dir, cache=cache, decode=decode))


def mds(
    path: str | os.PathLike,
    cache_dir: str | os.PathLike | None,
    cache_bytes: int | None,
    timeout_s: float | None = None,
) -> SourceView:
    """A MosaicML Streaming (MDS) dataset folder, local or gs://, read in place."""
    from tpufeed.sources.mds.source import MDSSource

    return SourceView(MDSSource(path, cache=cache_for(cache_dir, cache_bytes, timeout_s)))
