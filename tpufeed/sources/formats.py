"""One place per shard file format: its readers, writer, file extensions and record counting.

Every site that once chose by `if format == ...` asks this registry instead: the sources that
open a dataset's shards, `tpufeed inspect` and `tpufeed bench` (which tell a format from a file
name), the Beam build (which writes shards), the CLI's `--format` choices and the manifest
check. Readers and writers are named by import path and loaded on first use, so naming a
format imports neither its reader nor the library behind it.

A file name belongs to a format when it ends with one of its extensions, or with one followed
by a TFDS-style shard suffix (`train.array_record-00000-of-00016`); case does not matter.

>>> format_for_path("data/train.tfr").name
'tfrecord'
>>> FORMATS["array_record"].extensions
('.array_record', '.ar')
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tpufeed.errors import InvalidArgumentError

__all__ = [
    "FORMATS",
    "FileFormat",
    "format_for_path",
    "get_format",
    "guess_format",
    "writable_formats",
]


_SHARD_SUFFIX = re.compile(r"-\d+-of-\d+")


def _load(spec: str) -> Any:
    """The object named by "module:attribute"."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class FileFormat:
    """A record file format. `file_reader(path, remote=...)` opens one file for reads by
    record index (bytes, or dicts for a format of rows such as Parquet); `source_reader(paths)` opens paths or globs as one source; `writer(path,
    records, options)` writes a shard and returns its count (None: tpufeed does not write the
    format). `counts_from_index`: a file's record count is known without reading its records
    (ArrayRecord's footer); otherwise counting reads the whole file. `record_framing`: bytes
    every record takes besides its data (a manifest's count must fit the shard's size).
    `needs_local_copy`: its reader opens local files only, so gs:// files need the shard
    cache (ranged reads will not do). `checks_records`: its reader checks each record's bytes
    (ArrayRecord's per-chunk hashes, TFRecord's per-record CRC32C) and names a damaged one,
    so a shard with damaged bytes loses only those records (`VerifiedShard`)."""

    name: str
    title: str
    extensions: tuple[str, ...]  # the first is the one the build writes
    file_reader: str
    source_reader: str
    constructor: str  # the Dataset classmethod that opens such files
    writer: str | None = None
    writer_options: bool = False  # whether `writer` takes an options string
    counts_from_index: bool = True
    record_framing: int | None = None
    needs_local_copy: bool = False  # its reader opens local files: gs:// ones need the cache
    checks_records: bool = False  # its reader finds a damaged record (chunk) by its checksum

    def __post_init__(self) -> None:
        if not self.extensions or not all(
            e.startswith(".") and e == e.lower() for e in self.extensions
        ):
            raise InvalidArgumentError(
                f"format {self.name!r}: extensions must be lower-case and "
                f"start with '.', got {self.extensions!r}"
            )

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickled by name: a copy is the registry's own object."""
        return get_format, (self.name,)

    @property
    def extension(self) -> str:
        """The extension of the shards the build writes."""
        return self.extensions[0]

    def matches(self, path: str | os.PathLike) -> bool:
        """Whether the file name of `path` says it is in this format."""
        name = os.fspath(path).rstrip("/").rsplit("/", 1)[-1].lower()
        stem = (
            name[: m.start()]
            if (m := _SHARD_SUFFIX.search(name)) and m.end() == len(name)
            else name
        )
        return any(stem.endswith(ext) for ext in self.extensions)

    def open_file(
        self, path: str, remote: Any = None, pinned: Any = None, root: str | None = None
    ) -> Any:
        """One file of this format, read by record index (`remote`: its gs:// object; `pinned`:
        the `FileIdentity` a local file must have, from when it was first opened; `root`: the
        folder a local file must lie in, for the shards a manifest names)."""
        if root is None:
            return _load(self.file_reader)(path, remote=remote, pinned=pinned)
        return _load(self.file_reader)(path, remote=remote, pinned=pinned, root=root)

    def open_source(self, paths: Any) -> Any:
        """The records of `paths` (paths or globs, local or gs://) as one source."""
        return _load(self.source_reader)(paths)

    def write(self, path: str, records: Iterable[bytes], options: str | None = None) -> int:
        """Writes `records` to a new local file `path`; returns how many were written."""
        if self.writer is None:
            raise InvalidArgumentError(
                f"tpufeed reads {self.title} files but does not write "
                f"them; write shards as one of {writable_formats()}"
            )
        write: Callable[..., int] = _load(self.writer)
        return write(path, records, options) if self.writer_options else write(path, records)

    def count_records(self, path: str) -> int:
        """The records in the local file `path` (for TFRecord this reads the whole file)."""
        opened = self.open_file(path)
        try:
            return len(opened)
        finally:
            opened.close()

    def count_problem(self, num_records: int, num_bytes: int) -> str | None:
        """Why a file of `num_bytes` bytes cannot hold `num_records` records, or None."""
        if self.record_framing is None:
            return None
        if num_records * self.record_framing > num_bytes or (num_records == 0) != (num_bytes == 0):
            return f"a {self.title} file of {num_bytes:,} bytes cannot hold {num_records} records"
        return None


FORMATS: dict[str, FileFormat] = {
    f.name: f
    for f in (
        FileFormat(
            name="array_record",
            title="ArrayRecord",
            extensions=(".array_record", ".ar"),
            file_reader="tpufeed.sources.array_record.source:ArrayRecordFile",
            source_reader="tpufeed.sources.array_record.source:ArrayRecordSource",
            constructor="from_array_record",
            writer="tpufeed.sources.array_record.shard:write_array_record_shard",
            writer_options=True,
            counts_from_index=True,
            needs_local_copy=True,
            checks_records=True,
        ),
        FileFormat(
            name="tfrecord",
            title="TFRecord",
            extensions=(".tfrecord", ".tfrecords", ".tfr"),
            file_reader="tpufeed.sources.tfrecord.source:TFRecordFile",
            source_reader="tpufeed.sources.tfrecord.source:TFRecordSource",
            constructor="from_tfrecord",
            writer="tpufeed.sources.tfrecord.framing:write_tfrecords",
            counts_from_index=False,
            record_framing=16,
            checks_records=True,
        ),
        # Read only (rows come as dicts, not bytes): never a shard format of a built dataset.
        FileFormat(
            name="parquet",
            title="Parquet",
            extensions=(".parquet",),
            file_reader="tpufeed.sources.parquet.source:ParquetFile",
            source_reader="tpufeed.sources.parquet.source:ParquetSource",
            constructor="from_parquet",
            counts_from_index=True,
        ),
    )
}


def writable_formats() -> list[str]:
    """The names of the formats `tpufeed build` and `WriteShards` can write, sorted."""
    return sorted(name for name, f in FORMATS.items() if f.writer is not None)


def get_format(name: object, option: str = "format") -> FileFormat:
    """The format called `name`; an error quoting it and the choices otherwise."""
    fmt = FORMATS.get(name) if isinstance(name, str) else None
    if fmt is None:
        raise InvalidArgumentError(f"{option} must be one of {sorted(FORMATS)}, got {name!r}")
    return fmt


def format_for_path(path: str | os.PathLike) -> FileFormat | None:
    """The format whose extension the file name of `path` carries, or None."""
    for fmt in FORMATS.values():
        if fmt.matches(path):
            return fmt
    return None


def guess_format(path: str | os.PathLike) -> FileFormat:
    """`format_for_path`, or an error naming the path and the extensions known."""
    fmt = format_for_path(path)
    if fmt is None:
        known = ", ".join(f"{ext} ({f.name})" for f in FORMATS.values() for ext in f.extensions)
        raise InvalidArgumentError(
            f"cannot tell the format of {os.fspath(path)} from its name "
            f"(known: {known}); pass --format"
        )
    return fmt
