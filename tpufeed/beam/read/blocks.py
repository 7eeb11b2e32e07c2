"""Reading a block of a build's inputs (see `block_plan` for what blocks are): its records,
and the counts that tell the blocks after it where they start.

A block needs to know where it starts in its file (the record index and line number of its
first record, for per-record randomness and messages): `count_block` counts the records and
lines of the blocks before it, and `file_starts` turns the counts into those starts.

>>> blocks = plan_blocks(expand_inputs(["raw/*.jsonl"]))  # doctest: +SKIP
>>> starts = file_starts(blocks, {b.id: count_block(b) for b in blocks})  # doctest: +SKIP
>>> next(read_block(blocks[0], starts[0]))  # doctest: +SKIP
(0, 'raw/a.jsonl line 1', {'text': 'a'})
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from tpufeed.beam.read.block_plan import (
    DEFAULT_BLOCK_BYTES,
    Block,
    BlockStart,
    file_starts,
    needs_count,
    plan_blocks,
)
from tpufeed.beam.read.inputs import (
    InputFile,
    Malformed,
    image_record,
    jsonl_record,
    open_input,
    read_input,
    read_line,
    skip_line,
)
from tpufeed.errors import SourceError

# The plan's names too: they were found here before block_plan held them.
__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "Block",
    "BlockStart",
    "count_block",
    "file_starts",
    "needs_count",
    "plan_blocks",
    "read_block",
]


class _Lines:
    """The lines of a byte range that start in [start, end) (lines may run past `end`), with
    the offset after the last line handed out."""

    def __init__(self, f: BinaryIO, start: int, path: str):
        self._f, self.path = f, path
        if start > 0:
            f.seek(start - 1)
            self.pos = start - 1 + skip_line(f)  # the line the block before owns
        else:
            f.seek(0)
            self.pos = 0
        self.count = 0
        self.where = (
            (lambda line: f"{path} (line {line} of the block from byte {start:,})")
            if start > 0
            else (lambda line: f"{path} line {line}")
        )

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = read_line(self._f, self.where(self.count + 1), self.path)
        if not line:
            raise StopIteration
        self.pos += len(line)
        self.count += 1
        return line


def _jsonl(block: Block, start: BlockStart) -> Iterator[tuple[int, str, Any]]:
    index = start.record
    with open_input(block.path) as f:
        lines = _Lines(f, block.start, block.path)
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
        lines = _Lines(f, 0, path)
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
    header = _csv_header(block.path)
    index = start.record if start else 0
    with open_input(block.path) as f:
        lines = _Lines(f, block.start, block.path)
        for row in _csv_rows(lines, block, start):
            if start is None:
                yield index, "", None
            else:
                origin = _where(block, start, lines.count)
                yield index, origin, _csv_record(row, header, origin)
            index += 1
    if tally is not None:
        tally.append(lines.count)


def _csv_rows(lines: _Lines, block: Block, start: BlockStart | None) -> Iterator[list[str]]:
    """The non-empty rows that start in the block, without the header (block 0 owns its line).
    A row that spans lines is refused where the file is read in several blocks."""
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
                f"{_where(block, start, lines.count)}: malformed CSV: {e}", path=block.path
            ) from e
        if lines.count - before > 1 and not block.single:
            raise SourceError(
                f"{_where(block, start, lines.count)}: a quoted field holds a line break; a "
                "CSV file read in several blocks must have one record a line (pass a "
                "--block-mb larger than the file to read it whole)",
                path=block.path,
            )
        if first:  # block 0 owns the header line
            first = False
            continue
        if row:
            yield row


def _csv_record(row: list[str], header: list[str], origin: str) -> dict[str, str] | Malformed:
    """A row as a dict keyed by the header, or Malformed when its field count differs."""
    if len(row) == len(header):
        return dict(zip(header, row))
    missing = header[len(row) :]
    why = (
        f"missing column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
        if missing
        else f"{len(row) - len(header)} extra field(s)"
    )
    return Malformed(origin, f"row has {len(row)} fields, the header has {len(header)} ({why})")


def _array_record(block: Block, start: BlockStart) -> Iterator[tuple[int, str, Any]]:
    import numpy as np

    from tpufeed import codec
    from tpufeed.errors import CodecError
    from tpufeed.sources.array_record.source import ArrayRecordFile

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
        lines = _Lines(f, block.start, block.path)
        data = f.read(max(0, block.end - lines.pos)) if lines.pos < block.end else b""
        if data and not data.endswith(b"\n"):  # the last line owned here runs past the end
            where = _where(block, None, data.count(b"\n") + 1)
            data += read_line(f, where, block.path)
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
