"""The derived files the one fault suite runs over: files tpufeed makes from a source and keeps
(tar and TFRecord indexes, MDS and gzip tar decompressed copies, record-cache entries, the
shard cache's copies and the facts it keeps about an object). A registry, like tests/faults/formats.py.

Each `DerivedKind` names the format whose dataset makes it (`FORMATS`), where its files lie,
how a pipeline that makes them is opened, and which write of tpufeed's the SIGKILL case stops
in the middle (`writer`, see tests/faults/killed_writer.py). A new kind of derived file joins
tests/faults/test_derived_faults.py with one entry in `DERIVED`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tpufeed
from tests.faults.formats import FORMATS

RECORD_CACHE_BYTES = 1 << 20
SHARD_CACHE_BYTES = 64 << 20


@dataclass(frozen=True)
class DerivedKind:
    """One kind of derived file. `pattern`: its files, under the derived folder, or under the
    dataset's own folder if `beside`; `opens`: the pipeline that makes and reads them, over a
    dataset at a location (a folder, or a gs://, s3://, http:// or hf://datasets/ prefix: `store`, its
    scheme, served by the GCS emulator, moto's S3 server, or the web server of
    tests/http_server.py and its Hub,
    as tests/conftest.py starts them); `writer`: what makes one
    ("derived": `storage.derived.write_derived`, "record cache", "shard cache", "shard cache
    record"). `warns`: a bad one is removed with a warning; the shard cache's record of a
    verified copy is not (a bad record only has the copy's CRC32C checked again, and a new
    record written). `remade`: a bad one is made again by the read; the record map of an
    ArrayRecord file is made by tpufeed's writer only, so a bad one is removed and the read
    goes on without it (and the full-disk and killed-writer cases, of writes a read makes,
    are not its own)."""

    name: str
    format: str
    pattern: str
    writer: str = "derived"
    beside: bool = False
    store: str = ""
    warns: bool = True
    remade: bool = True
    opens: Callable[[str, Path], tpufeed.Dataset] | None = None

    def find(self, folder: Path, derived: Path) -> list[Path]:
        return sorted((folder if self.beside else derived).glob(self.pattern))

    def open(self, location: str, derived: Path) -> tpufeed.Dataset:
        if self.opens is not None:
            return self.opens(location, derived)
        return FORMATS[self.format].open(Path(location), derived)


def _record_cache(location: str, derived: Path) -> tpufeed.Dataset:
    ds = FORMATS["array_record"].open(Path(location), derived)
    return ds.cache(str(derived / "records"), max_bytes=RECORD_CACHE_BYTES)


def _tars_from_store(location: str, derived: Path) -> tpufeed.Dataset:
    """WebDataset tars keep no checksum of their data: only the cache's check guards a copy."""
    return tpufeed.Dataset.from_webdataset(
        f"{location}/*.tar", cache_dir=derived, cache_bytes=SHARD_CACHE_BYTES
    )


def _parquet_from_store(location: str, derived: Path) -> tpufeed.Dataset:
    """Parquet files as the Hugging Face Hub serves them (hf://: the revision resolved, the
    resolve URL's redirect to the CDN, no checksum but the LFS file's SHA-256 as ETag)."""
    return tpufeed.Dataset.from_parquet(
        f"{location}/*.parquet", cache_dir=derived, cache_bytes=SHARD_CACHE_BYTES
    )


def _tars_over_http(location: str, derived: Path) -> tpufeed.Dataset:
    """A plain web server lists nothing: the shards are named one by one."""
    urls = [f"{location}/d-{shard}.tar" for shard in range(2)]
    return tpufeed.Dataset.from_webdataset(urls, cache_dir=derived, cache_bytes=SHARD_CACHE_BYTES)


def _from_store(location: str, derived: Path) -> tpufeed.Dataset:
    return tpufeed.Dataset.from_array_record(
        f"{location}/*.array_record", cache_dir=derived, cache_bytes=SHARD_CACHE_BYTES
    )


DERIVED: dict[str, DerivedKind] = {
    kind.name: kind
    for kind in [
        DerivedKind("tfrecord index", "tfrecord", "*.tpufeed-index"),
        DerivedKind(
            "array_record record map",
            "array_record",
            "*.ar.tpufeed-index",
            beside=True,
            remade=False,
        ),
        DerivedKind("built tfrecord index", "built-tfrecord", "*.tpufeed-index", beside=True),
        DerivedKind("tar index", "webdataset", "*.wds.tpufeed-index"),
        DerivedKind("tgz copy", "webdataset-gz", "wds/*.tar"),
        DerivedKind("mds copy", "mds-zstd", "mds/*.raw"),
        DerivedKind("mds gz copy", "mds-gz", "mds/*.raw"),
        DerivedKind(
            "record cache", "array_record", "records/*/*/*", "record cache", opens=_record_cache
        ),
        DerivedKind(
            "shard cache",
            "array_record",
            "shards/*.data",
            "shard cache",
            store="gs",
            opens=_from_store,
        ),
        DerivedKind(
            "shard cache over s3",
            "webdataset",
            "shards/*.data",
            "shard cache",
            store="s3",
            opens=_tars_from_store,
        ),
        DerivedKind(
            "shard cache over https",
            "webdataset",
            "shards/*.data",
            "shard cache",
            store="http",
            opens=_tars_over_http,
        ),
        DerivedKind(
            "shard cache over hf",
            "parquet",
            "shards/*.data",
            "shard cache",
            store="hf",
            opens=_parquet_from_store,
        ),
        DerivedKind(
            "shard cache facts", "array_record", "meta/*.facts", store="gs", opens=_from_store
        ),
        DerivedKind(
            "shard cache record",
            "array_record",
            "shards/*.json",
            "shard cache record",
            store="gs",
            warns=False,
            opens=_from_store,
        ),
    ]
}
