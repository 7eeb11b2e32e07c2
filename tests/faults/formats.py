"""The formats the one fault suite runs over: a registry, as fsspec has one conformance suite
that every backend runs.

Each `Format` writes a small dataset with the format's own writer (array_record's, tpufeed's
TFRecord writer, pyarrow, webdataset's `TarWriter`, the MDSWriter fixtures of tests/data/mds,
the build's layout of tests/dataset_folder.py; WebDataset's shards gzipped) in two variants, "a" and "b": the same files, of
the same sizes, holding other records (so a file of "b" put in place of one of "a" keeps its
size and modification time and differs only by its inode and bytes; for MDS fixtures written
once, "b" is a copy of "a": other inodes, the same records). It says which records each
variant holds and how tpufeed opens the dataset, with its derived files (indexes, decompressed
copies) kept in a folder of the test's choosing.

A new format joins the suite with one entry in `FORMATS`; tests/faults/test_file_faults.py
then replaces, swaps, links and FIFOs each of its files, and, where it makes derived files, an
entry in tests/faults/derived_kinds.py's `DERIVED` runs those through
tests/faults/test_derived_faults.py. Its parsers join the fuzz with a `Layout`
(tests/faults/parser_layouts.py).
"""

from __future__ import annotations

import glob
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tpufeed

MDS_DATA = Path(__file__).resolve().parents[1] / "data" / "mds"
VARIANTS = ("a", "b")


@dataclass(frozen=True)
class Format:
    """One format as the fault suite sees it.

    `write(folder, variant)` writes the dataset; `records(variant)` are its records and
    `comparable(read)` puts what tpufeed read in their form; `open(folder, derived)` opens it,
    its derived files under `derived`. `rooted`: its files must lie inside its folder (a link out
    is refused). `opened_once`: files read only while the dataset is opened (an index, a
    manifest): replaced later, they change nothing. `unread(name)`: files pinned at open whose
    records are read from another file (MDS's compressed shards beside their raw twins)."""

    write: Callable[[Path, str], None]
    records: Callable[[str], list[Any]]
    open: Callable[[Path, Path], tpufeed.Dataset]
    comparable: Callable[[list[Any]], list[Any]] = list
    rooted: bool = False
    opened_once: tuple[str, ...] = ()
    unread: Callable[[str], bool] = lambda name: False

    def reread(self, name: str) -> bool:
        """Whether a reader that opens the dataset's files again reads records from `name`."""
        return name not in self.opened_once and not self.unread(name)


def _blobs(variant: str, shard: int) -> list[bytes]:
    """Six records of shard `shard`: lengths alike in both variants, bytes not."""
    rng = np.random.default_rng([VARIANTS.index(variant), shard])
    return [rng.bytes(20 + 7 * k) for k in range(6)]


def _all_blobs(variant: str) -> list[bytes]:
    return _blobs(variant, 0) + _blobs(variant, 1)


def _glob(folder: Path, pattern: str) -> list[str]:
    return sorted(glob.glob(str(folder / pattern)))


# -- plain record files -----------------------------------------------------------------------


def _write_array_record(folder: Path, variant: str) -> None:
    from tpufeed.sources.array_record import write_array_records

    for shard in range(2):
        write_array_records(folder / f"d-{shard}.array_record", _blobs(variant, shard))


def _write_tfrecord(folder: Path, variant: str) -> None:
    from tpufeed.sources.tfrecord import write_tfrecords

    for shard in range(2):
        write_tfrecords(str(folder / f"d-{shard}.tfrecord"), _blobs(variant, shard))


def _write_parquet(folder: Path, variant: str) -> None:
    """Without statistics or compression, so both variants' files have one size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for shard in range(2):
        ids = np.arange(6, dtype=np.int64) + 100 * VARIANTS.index(variant) + 6 * shard
        table = pa.table({"id": ids, "b": pa.array(_blobs(variant, shard), pa.binary())})
        pq.write_table(
            table,
            folder / f"d-{shard}.parquet",
            compression="NONE",
            use_dictionary=False,
            write_statistics=False,
            write_page_checksum=True,
        )


def _parquet_records(variant: str) -> list[Any]:
    first = 100 * VARIANTS.index(variant)
    return [(first + i, blob) for i, blob in enumerate(_all_blobs(variant))]


def _parquet_rows(rows: list[Any]) -> list[Any]:
    return [(int(row["id"]), row["b"]) for row in rows]


# -- WebDataset -------------------------------------------------------------------------------


def _write_webdataset(folder: Path, variant: str) -> None:
    from tests.sources.tar_damage import write_shard

    for shard in range(2):
        write_shard(folder / f"d-{shard}.tar", f"{variant}{shard}", count=6)


def _webdataset_records(variant: str) -> list[Any]:
    from tests.sources.tar_damage import samples

    found = [s for shard in range(2) for s in samples(f"{variant}{shard}", 6)]
    return [(s["__key__"], s["txt"], int(s["cls"]), s["bin"]) for s in found]


def _webdataset_samples(read: list[Any]) -> list[Any]:
    return [(s["__key__"], s["txt"], int(s["cls"]), s["bin"]) for s in read]


def _write_webdataset_gz(folder: Path, variant: str) -> None:
    """The shards of `_write_webdataset` gzipped, as .tgz: stored (level 0, no time in the
    gzip header), so that both variants' files have one size."""
    import gzip
    import tempfile

    with tempfile.TemporaryDirectory() as plain:
        _write_webdataset(Path(plain), variant)
        for tar in sorted(Path(plain).iterdir()):
            packed = gzip.compress(tar.read_bytes(), compresslevel=0, mtime=0)
            (folder / f"{tar.stem}.tgz").write_bytes(packed)


# -- MDS: MDSWriter's fixtures ----------------------------------------------------------------


def _mds_fixture(name: str, compressed_only: bool = False) -> Callable[[Path, str], None]:
    def write(folder: Path, variant: str) -> None:
        source = MDS_DATA / name.format(variant=variant)
        for path in sorted(source.iterdir()):
            if not (compressed_only and path.name.endswith(".mds")):
                shutil.copyfile(path, folder / path.name)

    return write


def _trust_expected(variant: str) -> list[Any]:
    return json.loads((MDS_DATA / "trust" / "expected.json").read_text())[f"twins-{variant}"]


def _nested_expected(variant: str) -> list[Any]:
    """Streaming's own reading of part-a (the first five samples of `nested`); "b" is a copy."""
    return json.loads((MDS_DATA / "expected.json").read_text())["nested"][:5]


def _gz_expected(variant: str) -> list[Any]:
    """Streaming's own reading of the gz fixture; "b" is a copy of it."""
    return json.loads((MDS_DATA / "expected.json").read_text())["gz"]


def _mds_comparable(expected: Callable[[str], list[Any]]) -> Callable[[list[Any]], list[Any]]:
    """tpufeed's samples in the tagged form Streaming's were kept in (images decoded)."""
    from tests.sources.mds_data import tagged

    likes = expected("a")

    def comparable(read: list[Any]) -> list[Any]:
        return [tagged(r, like) for r, like in zip(read, likes)] + read[len(likes) :]

    return comparable


def _open_mds(folder: Path, derived: Path) -> tpufeed.Dataset:
    return tpufeed.Dataset.from_mds(folder, cache_dir=derived)


# -- built datasets ---------------------------------------------------------------------------


def _write_built(file_format: str) -> Callable[[Path, str], None]:
    def write(folder: Path, variant: str) -> None:
        from tests.dataset_folder import make_dataset

        make_dataset(folder, [_blobs(variant, 0), _blobs(variant, 1)], file_format)

    return write


FORMATS: dict[str, Format] = {
    "array_record": Format(
        _write_array_record,
        _all_blobs,
        lambda folder, derived: tpufeed.Dataset.from_array_record(_glob(folder, "*.array_record")),
    ),
    "tfrecord": Format(
        _write_tfrecord,
        _all_blobs,
        lambda folder, derived: tpufeed.Dataset.from_tfrecord(
            _glob(folder, "*.tfrecord"), index_dir=derived
        ),
    ),
    "parquet": Format(
        _write_parquet,
        _parquet_records,
        lambda folder, derived: tpufeed.Dataset.from_parquet(_glob(folder, "*.parquet")),
        _parquet_rows,
    ),
    "webdataset": Format(
        _write_webdataset,
        _webdataset_records,
        lambda folder, derived: tpufeed.Dataset.from_webdataset(
            _glob(folder, "*.tar"), index_dir=derived
        ),
        _webdataset_samples,
    ),
    # gzip shards, each decompressed into a derived copy that its samples are read from.
    "webdataset-gz": Format(
        _write_webdataset_gz,
        _webdataset_records,
        lambda folder, derived: tpufeed.Dataset.from_webdataset(
            _glob(folder, "*.tgz"), index_dir=derived, cache_dir=derived
        ),
        _webdataset_samples,
    ),
    # Streaming's raw twins beside zstd shards: records are read from the twins.
    "mds": Format(
        _mds_fixture("trust/twins-{variant}"),
        _trust_expected,
        _open_mds,
        _mds_comparable(_trust_expected),
        rooted=True,
        opened_once=("index.json",),
        unread=lambda name: name.endswith(".zstd"),
    ),
    # zstd shards alone: each decompressed into a derived copy.
    "mds-zstd": Format(
        _mds_fixture("trust/twins-{variant}", compressed_only=True),
        _trust_expected,
        _open_mds,
        _mds_comparable(_trust_expected),
        rooted=True,
        opened_once=("index.json",),
    ),
    # gz shards (md5 in the index) alone, as after an upload: each decompressed into a copy.
    "mds-gz": Format(
        _mds_fixture("gz"),
        _gz_expected,
        _open_mds,
        _mds_comparable(_gz_expected),
        rooted=True,
        opened_once=("index.json",),
    ),
    # Uncompressed shards with no hashes in the index: only their pins guard them.
    "mds-plain": Format(
        _mds_fixture("nested/part-a"),
        _nested_expected,
        _open_mds,
        _mds_comparable(_nested_expected),
        rooted=True,
        opened_once=("index.json",),
    ),
    "built-array_record": Format(
        _write_built("array_record"),
        _all_blobs,
        lambda folder, derived: tpufeed.Dataset.open(folder),
        rooted=True,
        opened_once=("manifest.json",),
    ),
    "built-tfrecord": Format(
        _write_built("tfrecord"),
        _all_blobs,
        lambda folder, derived: tpufeed.Dataset.open(folder),
        rooted=True,
        opened_once=("manifest.json",),
    ),
}
