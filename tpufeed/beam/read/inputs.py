"""The raw inputs of `tpufeed build`: JSONL, CSV, Parquet, TFRecords of tf.train.Example,
ArrayRecord files and folders of images, read as records that carry where they came from.

`read_input(item)` yields `(index, origin, record)`, where `origin` names the file and line
(or record) for messages, and `record` is a dict or bytes, or a `Malformed` saying what is
wrong with that one record, so that the build either stops on it or counts it as skipped.
Damage that ends a file (a torn TFRecord frame) raises.

Kinds come from the extension: .jsonl .ndjson .json, .csv, and the file extensions of
`tpufeed.sources.formats` (.parquet, .tfrecord .tfrecords .tfr, .array_record .ar); a folder
is a folder of images (class sub-folders give `label` and `class_name`). `gs://` works for the
formats read as a stream (JSONL, CSV, TFRecord) and for Parquet (read by ranges).

Parquet rows come as `Dataset.from_parquet` gives them (numpy scalars, str, bytes, arrays; None
for null). Values the codec cannot store (a null, a ragged list of lists, a struct) are left for
the transforms to fix; a row that still holds one is a bad record named by file and row.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from tpufeed import codec
from tpufeed.errors import (
    CodecError,
    CorruptDataError,
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
    TpufeedError,
)
from tpufeed.sources.formats import FORMATS, format_for_path
from tpufeed.sources.tfrecord.framing import read_stream
from tpufeed.storage.opener import open_regular
from tpufeed.transforms.example import parse_example

__all__ = [
    "InputFile",
    "Malformed",
    "expand_inputs",
    "image_record",
    "jsonl_record",
    "open_input",
    "read_input",
    "read_line",
    "skip_line",
]

_TEXT_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


@dataclass(frozen=True)
class InputFile:
    path: str
    kind: str  # jsonl | csv | parquet | tfrecord | array_record | images


@dataclass(frozen=True)
class Malformed:
    """One bad input record: where it is and why it is bad."""

    origin: str
    cause: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.cause}"


def _kind_of(path: str) -> str:
    name = path.rsplit("/", 1)[-1].lower()
    for suffix, kind in _TEXT_KINDS.items():
        if name.endswith(suffix):
            return kind
    fmt = format_for_path(name)
    if fmt is not None and fmt.name in _READERS:
        return fmt.name
    known = list(_TEXT_KINDS) + [
        e for f in FORMATS.values() if f.name in _READERS for e in f.extensions
    ]
    raise InvalidArgumentError(
        f"{path}: cannot tell the input format from the extension; expected one of "
        f"{sorted(known)} or a folder of images"
    )


def _match(pattern: str) -> list[str]:
    if "://" in pattern:
        from apache_beam.io.filesystems import FileSystems

        found = FileSystems.match([pattern])[0].metadata_list
        return sorted(m.path for m in found)
    if any(c in pattern for c in "*?["):
        return sorted(glob.glob(pattern))
    return [pattern] if os.path.exists(pattern) else []


def expand_inputs(patterns: Sequence[str]) -> list[InputFile]:
    """The input files named by paths and globs, each glob sorted, without repeats."""
    if isinstance(patterns, str) or not patterns:
        raise InvalidArgumentError(f"--input needs at least one path or glob, got {patterns!r}")
    out: dict[str, InputFile] = {}
    for pattern in patterns:
        matches = _match(pattern)
        if not matches:
            raise SourceNotFoundError(f"--input {pattern!r} matches no file", path=pattern)
        for path in matches:
            kind = "images" if os.path.isdir(path) else _kind_of(path)
            out.setdefault(path, InputFile(path, kind))
    return list(out.values())


def open_input(path: str) -> BinaryIO:
    """`path` open for reading: a local file through the opener (a FIFO or a device is refused
    without blocking), a URL through Beam's file systems."""
    try:
        if "://" in path:
            from apache_beam.io.filesystems import FileSystems

            return FileSystems.open(path)
        return os.fdopen(open_regular(path), "rb")
    except TpufeedError:
        raise
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {path}", path=path) from None
    except Exception as e:
        raise SourceError(f"{path}: cannot open: {e}", path=path) from e


_BOM = b"\xef\xbb\xbf"
# A longer line is refused rather than held: memory for one line stays within this bound.
MAX_LINE_BYTES = 64 << 20
_SKIP_PIECE = 1 << 20


def read_line(f: BinaryIO, where: str, path: str) -> bytes:
    """The next line of `f` (b"" at its end), at most `MAX_LINE_BYTES` long; a longer one
    raises `CorruptDataError` naming `where` (the file and line) before more of it is read."""
    line = f.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES:
        raise CorruptDataError(
            f"{where}: the line is longer than {MAX_LINE_BYTES:,} bytes (not a JSONL or CSV "
            "record tpufeed reads: a line is held whole in memory)",
            path=path,
        )
    return line


def skip_line(f: BinaryIO) -> int:
    """Reads past the rest of the current line, a piece at a time; returns its length."""
    skipped = 0
    while piece := f.readline(_SKIP_PIECE):
        skipped += len(piece)
        if piece.endswith(b"\n"):
            break
    return skipped


def jsonl_record(line: bytes, origin: str) -> Any:
    """The dict of one JSONL line, or a Malformed saying why it is not one."""
    if not line.startswith(_BOM):  # the common case: parsed as it is (JSON allows the line end)
        try:
            record = json.loads(line.decode())
        except (ValueError, RecursionError):  # not UTF-8, or not JSON: said exactly below
            pass
        else:
            if type(record) is dict:
                return record
    try:
        # Without its line end, so that an error at the end of the line is reported
        # there, not at column 1 of a next line; columns count characters.
        text = line.decode("utf-8-sig").rstrip("\r\n")  # a BOM may open the file
        record = json.loads(text)
    except UnicodeDecodeError as e:
        return Malformed(origin, f"not UTF-8: {e}")
    except json.JSONDecodeError as e:
        end = " (the end of the line)" if e.pos >= len(text) else ""
        return Malformed(origin, f"invalid JSON: {e.msg} at column {e.colno}{end}")
    except ValueError as e:  # a number of more digits than Python converts
        return Malformed(origin, f"invalid JSON: {e}")
    except RecursionError:
        return Malformed(origin, "invalid JSON: arrays or objects nested too deeply to parse")
    if not isinstance(record, dict):
        return Malformed(origin, f"expected a JSON object, got {type(record).__name__}")
    return record


def _jsonl(path: str) -> Iterator[tuple[int, str, Any]]:
    index, number = 0, 0
    with open_input(path) as f:
        while line := read_line(f, f"{path} line {number + 1}", path):
            number += 1
            if not line.strip():
                continue
            origin = f"{path} line {number}"
            yield index, origin, jsonl_record(line, origin)
            index += 1


def _text(raw: BinaryIO, path: str) -> Iterator[str]:
    """The lines of a CSV file as text, each bounded by `MAX_LINE_BYTES`."""
    number = 0
    while line := read_line(raw, f"{path} line {number + 1}", path):
        number += 1
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SourceError(f"{path} line {number}: not UTF-8: {e}", path=path) from e


def _csv(path: str) -> Iterator[tuple[int, str, Any]]:
    with open_input(path) as raw:
        reader = csv.reader(_text(raw, path))
        try:
            header = next(reader, None)
            if header is None:
                return
            if len(set(header)) != len(header) or not all(header):
                raise SourceError(
                    f"{path} line 1: the header {header} has empty or repeated column names",
                    path=path,
                )
            index = 0
            for row in reader:
                if not row:
                    continue
                origin = f"{path} line {reader.line_num}"
                if len(row) != len(header):
                    missing = header[len(row) :]
                    why = (
                        f"missing column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(repr, missing))}"
                        if missing
                        else f"{len(row) - len(header)} extra field(s)"
                    )
                    record: Any = Malformed(
                        origin, f"row has {len(row)} fields, the header has {len(header)} ({why})"
                    )
                else:
                    record = dict(zip(header, row))
                yield index, origin, record
                index += 1
        except csv.Error as e:
            raise SourceError(
                f"{path} line {reader.line_num}: malformed CSV: {e}", path=path
            ) from e


def _tfrecord(path: str) -> Iterator[tuple[int, str, Any]]:
    with open_input(path) as f:
        for index, data in enumerate(read_stream(f, path)):
            origin = f"{path} record {index}"
            try:
                record: Any = parse_example(data)
            except ValueError as e:
                record = Malformed(origin, f"not a tf.train.Example: {e}")
            yield index, origin, record


def _array_record(path: str) -> Iterator[tuple[int, str, Any]]:
    if "://" in path:
        raise SourceError(
            f"{path}: ArrayRecord inputs must be local files; copy them first", path=path
        )
    from tpufeed.sources.array_record.source import ArrayRecordFile

    shard = ArrayRecordFile(path)
    try:
        n = len(shard)
        for start in range(0, n, 1024):
            records = shard.read(np.arange(start, min(n, start + 1024)))
            for i, data in enumerate(records, start=start):
                try:
                    record: Any = codec.decode(data)  # tpufeed records come back as dicts
                except CodecError:
                    record = data
                yield i, f"{path} record {i}", record
    finally:
        shard.close()


def _parquet(path: str) -> Iterator[tuple[int, str, Any]]:
    from tpufeed.sources.parquet.source import iter_parquet_rows  # needs pyarrow: the parquet extra

    for index, row in enumerate(iter_parquet_rows(path)):
        yield index, f"{path} row {index}", row


def _images(folder: str) -> Iterator[tuple[int, str, Any]]:
    from tpufeed.transforms.image import load_pillow

    image_module = load_pillow()
    files = sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
        if name.lower().endswith(IMAGE_EXTENSIONS)
    )
    if not files:
        raise SourceNotFoundError(
            f"{folder}: folder holds no image files ({', '.join(IMAGE_EXTENSIONS)})", path=folder
        )
    labelled = all(rel.count(os.sep) == 1 for rel in files)
    classes = {name: i for i, name in enumerate(sorted({rel.split(os.sep)[0] for rel in files}))}
    for index, rel in enumerate(files):
        path = os.path.join(folder, rel)
        yield index, path, image_record(image_module, path, rel, classes if labelled else None)


def image_record(image_module: Any, path: str, rel: str, classes: dict[str, int] | None) -> Any:
    """The record of one image file (bytes, path, and class from its folder when `classes`
    is given), or a Malformed when Pillow cannot decode it."""
    with os.fdopen(open_regular(path), "rb") as f:  # a FIFO named x.jpg is refused
        data = f.read()
    try:
        with image_module.open(io.BytesIO(data)) as image:
            image.verify()
    except Exception as e:  # noqa: BLE001 - Pillow raises many kinds for bad input
        return Malformed(path, f"cannot decode image: {type(e).__name__}: {e}")
    record: dict[str, Any] = {"image": data, "path": rel.replace(os.sep, "/")}
    if classes is not None:
        record["class_name"] = rel.split(os.sep)[0]
        record["label"] = classes[record["class_name"]]
    return record


_READERS = {
    "jsonl": _jsonl,
    "csv": _csv,
    "parquet": _parquet,
    "tfrecord": _tfrecord,
    "array_record": _array_record,
    "images": _images,
}


def read_input(item: InputFile) -> Iterator[tuple[int, str, Any]]:
    """(index within the input, origin, record | Malformed) for every record of `item`."""
    return _READERS[item.kind](item.path)
