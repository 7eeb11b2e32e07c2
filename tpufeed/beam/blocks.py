"""Deterministic blocks of a build's inputs: the unit a worker reads, and what ranks count.

A block is a part of one input file, fixed by the file sizes alone (never by bundles or
workers): a line-aligned byte range of JSONL or CSV (it owns the lines that *start* in
[start, end)), an index range of an ArrayRecord file, a chunk of an image folder's sorted
list, or a whole TFRecord or Parquet file. Blocks are numbered in input order, so a record's
place in the dataset is (block, position in block).

A block needs to know where it starts in its file (the record index and line number of its
first record, for per-record randomness and messages): `count_block` counts the records and
lines of the blocks before it, and `file_starts` turns the counts into those starts.

>>> plan_blocks([InputFile("a.jsonl", "jsonl")], block_bytes=100)  # doctest: +SKIP
[Block(id=0, file_index=0, kind='jsonl', path='a.jsonl', start=0, end=100, ...), ...]
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from tpufeed.beam.inputs import (
    IMAGE_EXTENSIONS,
    InputFile,
    Malformed,
    image_record,
    jsonl_record,
    open_input,
    read_input,
)
from tpufeed.errors import SourceError, SourceNotFoundError

__all__ = ["Block", "BlockStart", "count_block", "file_starts", "plan_blocks", "read_block"]

DEFAULT_BLOCK_BYTES = 64 << 20
_SPLIT_BY_BYTES = ("jsonl", "csv")


@dataclass(frozen=True)
class Block:
    """One block: `start`/`end` are bytes (JSONL, CSV), record indices (ArrayRecord, images),
    or 0/-1 (a whole file). `count` is known without reading for index ranges (else None);
    `names` are the image paths of an image block; `single` says the file is this one block."""

    id: int
    file_index: int
    kind: str
    path: str
    start: int
    end: int
    single: bool
    size: int = 0  # bytes of input the block holds (estimated for ArrayRecord)
    count: int | None = None
    names: tuple[str, ...] = ()
    classes: tuple[str, ...] | None = None

    def describe(self) -> str:
        if self.single:
            return self.path
        unit = "bytes" if self.kind in _SPLIT_BY_BYTES else "records"
        return f"{self.path} ({unit} {self.start:,}-{self.end:,})"


@dataclass(frozen=True)
class BlockStart:
    """Where a block starts in its file: its first record's index and the lines before it."""

    record: int = 0
    line: int = 0


def _size(path: str) -> int:
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    return os.path.getsize(path)


def _images(folder: str) -> tuple[list[str], list[int]]:
    names, sizes = [], []
    for root, _, files in os.walk(folder):
        for name in files:
            if name.lower().endswith(IMAGE_EXTENSIONS):
                path = os.path.join(root, name)
                names.append(os.path.relpath(path, folder))
                sizes.append(os.path.getsize(path))
    if not names:
        raise SourceNotFoundError(
            f"{folder}: folder holds no image files ({', '.join(IMAGE_EXTENSIONS)})", path=folder
        )
    order = sorted(range(len(names)), key=names.__getitem__)
    return [names[i] for i in order], [sizes[i] for i in order]


def _file_blocks(index: int, item: InputFile, block_bytes: int) -> list[dict[str, Any]]:
    """The blocks of one input file, as Block fields without the global id."""
    base = {"file_index": index, "kind": item.kind, "path": item.path}
    if item.kind in _SPLIT_BY_BYTES:
        size = _size(item.path)
        cuts = list(range(0, size, block_bytes)) + [size]
        if len(cuts) < 2:  # an empty file: one empty block
            cuts = [0, 0]
        single = len(cuts) == 2
        return [
            dict(base, start=a, end=b, single=single, size=b - a) for a, b in zip(cuts, cuts[1:])
        ]
    if item.kind == "array_record" and "://" not in item.path:
        from tpufeed.sources.array_record import ArrayRecordFile

        shard = ArrayRecordFile(item.path)
        try:
            n = len(shard)
        finally:
            shard.close()
        size = _size(item.path)
        per_block = max(1, block_bytes * n // max(size, 1))  # records in about block_bytes
        cuts = list(range(0, n, per_block)) + [n] if n else [0, 0]
        return [
            dict(
                base,
                start=a,
                end=b,
                count=b - a,
                single=len(cuts) == 2,
                size=size * (b - a) // max(n, 1),
            )
            for a, b in zip(cuts, cuts[1:])
        ]
    if item.kind == "images":
        names, sizes = _images(item.path)
        labelled = all(name.count(os.sep) == 1 for name in names)
        classes = tuple(sorted({n.split(os.sep)[0] for n in names})) if labelled else None
        cuts, total = [0], 0
        for i, size in enumerate(sizes):
            total += size
            if total >= block_bytes and i + 1 < len(names):
                cuts.append(i + 1)
                total = 0
        cuts.append(len(names))
        return [
            dict(
                base,
                start=a,
                end=b,
                count=b - a,
                single=len(cuts) == 2,
                size=sum(sizes[a:b]),
                names=tuple(names[a:b]),
                classes=classes,
            )
            for a, b in zip(cuts, cuts[1:])
        ]
    return [
        dict(base, start=0, end=-1, single=True, size=_size(item.path))
    ]  # TFRecord, Parquet: read whole


def plan_blocks(files: Sequence[InputFile], block_bytes: int = DEFAULT_BLOCK_BYTES) -> list[Block]:
    """The blocks of `files`, numbered in input order; a pure function of the file sizes."""
    blocks: list[Block] = []
    for index, item in enumerate(files):
        for fields in _file_blocks(index, item, block_bytes):
            blocks.append(Block(id=len(blocks), **fields))
    return blocks


def file_starts(
    blocks: Sequence[Block], counts: dict[int, tuple[int, int]]
) -> dict[int, BlockStart]:
    """Each block's start in its file from the (records, lines) of the blocks before it
    (`counts` needs every block but the last of each file)."""
    starts: dict[int, BlockStart] = {}
    record = line = 0
    previous_file = -1
    for block in blocks:
        if block.file_index != previous_file:
            record = line = 0
            previous_file = block.file_index
        starts[block.id] = BlockStart(record, line)
        if block.id in counts:
            n, lines = counts[block.id]
            record, line = record + n, line + lines
    return starts


def needs_count(block: Block, next_block: Block | None) -> bool:
    """Whether a later block of the same file needs this block's counts read from the data."""
    return next_block is not None and next_block.file_index == block.file_index


class _Lines:
    """The lines of a byte range that start in [start, end) (lines may run past `end`), with
    the offset after the last line handed out."""

    def __init__(self, f: BinaryIO, start: int):
        self._f = f
        if start > 0:
            f.seek(start - 1)
            self.pos = start - 1 + len(f.readline())  # the line the block before owns
        else:
            f.seek(0)
            self.pos = 0
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = self._f.readline()
        if not line:
            raise StopIteration
        self.pos += len(line)
        self.count += 1
        return line


def _jsonl(block: Block, start: BlockStart) -> Iterator[tuple[int, str, Any]]:
    index = start.record
    with open_input(block.path) as f:
        lines = _Lines(f, block.start)
        while lines.pos < block.end:
            try:
                line = next(lines)
            except StopIteration:
                break
            if not line.strip():
                continue
            origin = f"{block.path} line {start.line + lines.count}"
            yield index, origin, jsonl_record(line, origin)
            index += 1


def _where(block: Block, start: BlockStart | None, line_in_block: int) -> str:
    """`path line N`; in the count pass of a later block, whose first line number is not
    known yet, the line of the block and the byte the block starts at."""
    if start is None and block.start > 0:
        return f"{block.path} (line {line_in_block} of the block from byte {block.start:,})"
    return f"{block.path} line {(start.line if start else 0) + line_in_block}"


def _text_lines(lines: _Lines, block: Block, start: BlockStart | None) -> Iterator[str]:
    for line in lines:
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SourceError(
                f"{_where(block, start, lines.count)}: not UTF-8: {e}", path=block.path
            ) from e


def _csv_header(path: str) -> list[str]:
    with open_input(path) as f:
        lines = _Lines(f, 0)
        whole = Block(id=0, file_index=0, kind="csv", path=path, start=0, end=-1, single=True)
        header = next(csv.reader(_text_lines(lines, whole, BlockStart())), None)
    if header is not None and (len(set(header)) != len(header) or not all(header)):
        raise SourceError(
            f"{path} line 1: the header {header} has empty or repeated column names", path=path
        )
    return header or []


def _csv(
    block: Block, start: BlockStart | None, tally: list[int] | None = None
) -> Iterator[tuple[int, str, Any]]:
    """The rows of a CSV block; with `start` None, the count pass: no records made."""
    path = block.path
    header = _csv_header(path)
    index = start.record if start else 0
    with open_input(path) as f:
        lines = _Lines(f, block.start)
        reader = csv.reader(_text_lines(lines, block, start))
        first = block.start == 0
        while lines.pos < block.end:
            before = lines.count
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise SourceError(
                    f"{_where(block, start, lines.count)}: malformed CSV: {e}", path=path
                ) from e
            if lines.count - before > 1 and not block.single:
                raise SourceError(
                    f"{_where(block, start, lines.count)}: a quoted field holds a line break; a "
                    "CSV file read in several blocks must have one record a line (pass a "
                    "--block-mb larger than the file to read it whole)",
                    path=path,
                )
            if first:  # block 0 owns the header line
                first = False
                continue
            if not row:
                continue
            if start is None:
                yield index, "", None
                index += 1
                continue
            origin = _where(block, start, lines.count)
            record: Any
            if len(row) != len(header):
                missing = header[len(row) :]
                why = (
                    f"missing column{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(repr, missing))}"
                    if missing
                    else f"{len(row) - len(header)} extra field(s)"
                )
                record = Malformed(
                    origin, f"row has {len(row)} fields, the header has {len(header)} ({why})"
                )
            else:
                record = dict(zip(header, row))
            yield index, origin, record
            index += 1
    if tally is not None:
        tally.append(lines.count)


def _array_record(block: Block, start: BlockStart) -> Iterator[tuple[int, str, Any]]:
    import numpy as np

    from tpufeed import codec
    from tpufeed.errors import CodecError
    from tpufeed.sources.array_record import ArrayRecordFile

    shard = ArrayRecordFile(block.path)
    try:
        for first in range(block.start, block.end, 1024):
            records = shard.read(np.arange(first, min(block.end, first + 1024)))
            for i, data in enumerate(records, start=first):
                try:
                    record: Any = codec.decode(data)  # tpufeed records come back as dicts
                except CodecError:
                    record = data
                yield i, f"{block.path} record {i}", record
    finally:
        shard.close()


def _image_block(block: Block) -> Iterator[tuple[int, str, Any]]:
    from tpufeed.transforms.image import load_pillow

    image_module = load_pillow()
    labels = {name: i for i, name in enumerate(block.classes)} if block.classes else None
    for index, rel in enumerate(block.names, start=block.start):
        path = os.path.join(block.path, rel)
        yield index, path, image_record(image_module, path, rel, labels)


def _count_jsonl(block: Block) -> tuple[int, int]:
    """(records, lines) of a JSONL block: its lines split in one pass over its bytes."""
    with open_input(block.path) as f:
        lines = _Lines(f, block.start)
        data = f.read(max(0, block.end - lines.pos)) if lines.pos < block.end else b""
        if data and not data.endswith(b"\n"):
            data += f.readline()  # the last line owned here runs past the end
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()  # after the final line end
    return sum(1 for part in parts if part.strip()), len(parts)


def count_block(block: Block) -> tuple[int, int]:
    """(records, lines) of a block, read from the data where the plan does not know them."""
    if block.count is not None:
        return block.count, 0
    if block.kind == "jsonl":
        return _count_jsonl(block)
    tally: list[int] = []
    records = sum(1 for _ in _csv(block, None, tally=tally))
    return records, tally[0]


def read_block(block: Block, start: BlockStart) -> Iterator[tuple[int, str, Any]]:
    """(index in the file, origin, record | Malformed) for every record of `block`."""
    if block.kind == "jsonl":
        return _jsonl(block, start)
    if block.kind == "csv":
        return _csv(block, start)
    if block.kind == "array_record" and block.end >= 0:
        return _array_record(block, start)
    if block.kind == "images":
        return _image_block(block)
    return read_input(InputFile(block.path, block.kind))
