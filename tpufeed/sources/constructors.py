"""The ways to make a pipeline from records: `Dataset.from_array_record`, `Dataset.open`, ...

`tpufeed.Dataset` inherits them, so they live here, beside the sources they open
(tpufeed.sources.opening), and a new source format adds its constructor here rather than to the
pipeline's front. Each opens its source and hands the view to `_over`, which `Dataset` gives.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tpufeed.sources import opening
from tpufeed.sources.view import SourceView
from tpufeed.storage.local import PathsLike

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["SourceConstructors"]


class SourceConstructors(abc.ABC):
    """Class methods that make a pipeline over a source; `tpufeed.Dataset` inherits them."""

    @classmethod
    @abc.abstractmethod
    def _over(cls, source: SourceView) -> Self:
        """A pipeline over `source`, with nothing else set."""

    @classmethod
    def from_source(cls, source: Any) -> Self:
        """Any object with `__len__` and `__getitem__(int)`: a Grain data source, a Hugging Face
        `datasets.Dataset` (elements as its format gives them). A `__getitems__(indices)`, if
        the object has one (`datasets.Dataset` does), reads each chunk in one call. Workers get
        the object pickled. For a Hugging Face dataset, `from_huggingface` gives elements typed
        like `from_parquet`'s."""
        return cls._over(opening.any_source(source))

    @classmethod
    def from_sequence(cls, items: Sequence[Any]) -> Self:
        """The items of an in-memory sequence (list, tuple, array), each an element."""
        return cls._over(opening.sequence(items))

    @classmethod
    def from_array_record(
        cls,
        paths: PathsLike,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """Records (bytes) of ArrayRecord files: a path, a glob, or a list of them, local or in an
        object store (gs://, s3://: docs/gcs.md, docs/s3.md). Remote shards go through the local
        shard cache (`cache_dir`, default $TPUFEED_CACHE_DIR else ~/.cache/tpufeed;
        `cache_bytes`, default 80% of free space).

        `timeout_s` bounds every store call of the source, here and in later reads: a listing, a
        metadata read, a byte range, a part of a download, retries included (default 120 s,
        each request waiting at most 60 s for an answer). A server that does not answer raises
        `SourceError` naming the object and the bound (docs/faults.md)."""
        return cls._over(opening.array_record(paths, cache_dir, cache_bytes, timeout_s))

    @classmethod
    def from_tfrecord(
        cls,
        paths: PathsLike,
        index_dir: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """Records (bytes) of TFRecord files, randomly accessible through an offset index;
        gs:// or s3:// files through the shard cache, or with `cache_bytes=0` as ranged GETs.
        `timeout_s` bounds each store call, as in `from_array_record`."""
        return cls._over(opening.tfrecord(paths, index_dir, cache_dir, cache_bytes, timeout_s))

    @classmethod
    def from_tfds(
        cls,
        name: str,
        split: str,
        data_dir: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """A dataset TFDS prepared (`name[/config][:version]`, ArrayRecord or TFRecord files
        under `data_dir`, default $TFDS_DATA_DIR else ~/tensorflow_datasets; local, gs:// or
        s3:// through the shard cache), read in place: its files and counts from
        `dataset_info.json`, never its builder's code. `split` is TFDS's (`train[:50%]`,
        `train[10:20]`, `train[:4shard]`, `train+test`, `all`), with TFDS's rounding; elements
        are what `tfds.data_source` gives, in its order: each record decoded with the
        dataset's `features.json` (`deserialize_example_np`; tensorflow_datasets is needed,
        TensorFlow is not), its Python numbers and lists as numpy values of the feature's
        dtype, as `tfds.load` gives them. `cache_dir`, `cache_bytes`, `timeout_s` as in `from_array_record`
        (docs/coming-from/tfds.md).

        >>> ds = Dataset.from_tfds("mnist", split="train[:50%]").shuffle(seed=0)  # doctest: +SKIP
        """
        return cls._over(opening.tfds(name, split, data_dir, cache_dir, cache_bytes, timeout_s))

    @classmethod
    def from_webdataset(
        cls,
        paths: PathsLike,
        decode: bool = True,
        index_dir: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """Samples of WebDataset tar shards (a path, a glob, a list, or WebDataset's urls:
        `{000..099}` brace ranges, `::`, `file:` URLs; local, gs:// or s3://), read in place by
        a sample index built once per shard: members grouped as WebDataset groups them, one
        dict per sample with `__key__`, `__url__` and a field per extension. Fields decode by
        extension as `WebDataset(...).decode()` does (`.json`, `.txt`, `.cls`, `.npy`, `.mp`,
        `.ten`, `.cbor`; images and unknown extensions stay bytes); `.pickle`/`.pyd` are
        refused; `decode=False` gives every field as bytes. `.tgz` / `.tar.gz` shards are
        decompressed once into a checked copy under `cache_dir`'s `wds/`; other compressions
        are refused. Stores and `timeout_s` as in `from_tfrecord` (docs/formats/webdataset.md).

        >>> ds = Dataset.from_webdataset("shards/train-{0000..0099}.tar").shuffle(seed=0)  # doctest: +SKIP
        """
        return cls._over(
            opening.webdataset(paths, decode, index_dir, cache_dir, cache_bytes, timeout_s)
        )

    @classmethod
    def from_parquet(
        cls,
        paths: PathsLike,
        columns: Sequence[str] | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        decoded_bytes: int = 256 << 20,
        timeout_s: float | None = None,
    ) -> Self:
        """Rows of Parquet files (a path, a glob or a list, local or in a store: gs://, s3://,
        https://, the Hugging Face Hub's hf://datasets/ORG/NAME/... through the shard cache) as
        dicts of `columns` (default all): numpy scalars and arrays, `str`, None for
        null (`tpufeed.sources._arrow_rows`). Each row group is decoded once and kept among
        `decoded_bytes` of decoded row groups per process; shuffled reads cost a decode per
        row group visit, so prefer small row groups or `shuffle(seed, window=K)`
        (`tpufeed.sources.parquet.source`). `timeout_s` bounds each store call, as in
        `from_array_record`."""
        return cls._over(
            opening.parquet(paths, columns, cache_dir, cache_bytes, decoded_bytes, timeout_s)
        )

    @classmethod
    def from_huggingface(
        cls,
        dataset: Any,
        columns: Sequence[str] | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """A Hugging Face `datasets.Dataset` (one split, already built or loaded: nothing is
        downloaded), read as Arrow in batches, its rows typed like `from_parquet`'s; or an
        `IterableDataset` (`streaming=True`) backed by Parquet files, whose files are read in
        place as `from_parquet` reads them: on the Hub through hf:// at the commit `datasets`
        resolved (`cache_dir`, `cache_bytes`, `timeout_s` as there), with a global shuffle and
        exact resume. One that maps, filters, shuffles or streams other files is refused with
        the `from_parquet("hf://datasets/...")` line that reads its files
        (docs/coming-from/huggingface.md).

        >>> hf = datasets.Dataset.from_dict({"x": [1, 2, None]})  # doctest: +SKIP
        >>> [e["x"] for e in Dataset.from_huggingface(hf)]  # doctest: +SKIP
        [np.int64(1), np.int64(2), None]
        """
        return cls._over(opening.huggingface(dataset, columns, cache_dir, cache_bytes, timeout_s))

    @classmethod
    def from_mds(
        cls,
        path: str | os.PathLike,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """Samples of a MosaicML Streaming (MDS) dataset folder, as `MDSWriter` wrote it (its
        `index.json`, or sub-folders each with one), local or gs://, read in place by index:
        element i is the sample dict `StreamingDataset(...)[i]` gives, except that `jpeg` and
        `png` columns stay encoded bytes for `tpufeed.transforms.image.DecodeImage` in workers
        and `pil` columns are uint8 arrays; `pkl` columns are refused. zstd, gz and bz2 shards
        are decompressed once into local copies; shard hashes in the index are checked on a
        shard's first read. gs:// shards go through the shard cache (`cache_dir`,
        `cache_bytes`, `timeout_s` as in `from_array_record`; docs/formats/mds.md).

        >>> ds = Dataset.from_mds("gs://bucket/mds-train").shuffle(seed=0)  # doctest: +SKIP
        """
        return cls._over(opening.mds(path, cache_dir, cache_bytes, timeout_s))

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        verify: bool = False,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> Self:
        """A dataset built by `tpufeed build` / `tpufeed.beam.WriteShards`: a folder or its
        manifest.json, local or gs://. Shard sizes, CRC32C and counts are checked on a shard's
        first read, or all at once with `verify=True` (gs:// shards by their object metadata,
        downloading nothing); elements are the decoded records. gs:// shards go through the
        shard cache, as in `from_array_record` (`cache_dir`, `cache_bytes`, and `timeout_s`
        bounding each GCS call; unused locally).

        >>> ds = Dataset.open("gs://bucket/train", timeout_s=30)  # doctest: +SKIP
        """
        return cls._over(opening.built_dataset(path, verify, cache_dir, cache_bytes, timeout_s))
