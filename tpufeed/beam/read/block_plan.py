"""The plan of a build's inputs: deterministic blocks, the unit a worker reads and ranks count.

A block is a part of one input file, fixed by the file sizes alone (never by bundles or
workers): a line-aligned byte range of JSONL or CSV (it owns the lines that *start* in
[start, end)), an index range of an ArrayRecord file, a chunk of an image folder's sorted
list, or a whole TFRecord or Parquet file. Blocks are numbered in input order, so a record's
place in the dataset is (block, position in block). `blocks` reads and counts them.

>>> plan_blocks([InputFile("a.jsonl", "jsonl")], block_bytes=100)  # doctest: +SKIP
[Block(id=0, file_index=0, kind='jsonl', path='a.jsonl', start=0, end=100, ...), ...]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpufeed.beam.read.inputs import IMAGE_EXTENSIONS, InputFile
from tpufeed.errors import SourceNotFoundError

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "Block",
    "BlockStart",
    "file_starts",
    "needs_count",
    "plan_blocks",
]

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
        return _byte_range_blocks(base, item.path, block_bytes)
    if item.kind == "array_record" and "://" not in item.path:
        return _array_record_blocks(base, item.path, block_bytes)
    if item.kind == "images":
        return _image_blocks(base, item.path, block_bytes)
    # TFRecord, Parquet: read whole
    return [dict(base, start=0, end=-1, single=True, size=_size(item.path))]


def _byte_range_blocks(base: dict[str, Any], path: str, block_bytes: int) -> list[dict[str, Any]]:
    """JSONL, CSV: byte ranges of at most `block_bytes`, all of one size (within a byte): a
    short last block would leave a worker idle while another reads a whole one."""
    size = _size(path)
    count = max(1, -(-size // block_bytes))
    cuts = [size * i // count for i in range(count + 1)]
    single = len(cuts) == 2
    return [dict(base, start=a, end=b, single=single, size=b - a) for a, b in zip(cuts, cuts[1:])]


def _array_record_blocks(base: dict[str, Any], path: str, block_bytes: int) -> list[dict[str, Any]]:
    """A local ArrayRecord file: index ranges of at most about `block_bytes` (the file's size
    shared out by records), all of one record count (within a record)."""
    from tpufeed.sources.array_record.source import ArrayRecordFile

    shard = ArrayRecordFile(path)
    try:
        n = len(shard)
    finally:
        shard.close()
    size = _size(path)
    count = min(max(1, n), max(1, -(-size // block_bytes)))  # blocks of one record count
    cuts = [n * i // count for i in range(count + 1)]
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


def _image_blocks(base: dict[str, Any], folder: str, block_bytes: int) -> list[dict[str, Any]]:
    """An image folder: runs of its sorted images of about `block_bytes` each, labelled with
    their class folders when every image sits in one."""
    names, sizes = _images(folder)
    labelled = all(name.count(os.sep) == 1 for name in names)
    classes = tuple(sorted({n.split(os.sep)[0] for n in names})) if labelled else None
    cuts = _image_cuts(sizes, block_bytes)
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


def _image_cuts(sizes: list[int], block_bytes: int) -> list[int]:
    """Where a folder's image blocks start, and its image count: a block ends at the first
    image that takes it to `block_bytes`."""
    cuts, total = [0], 0
    for i, size in enumerate(sizes):
        total += size
        if total >= block_bytes and i + 1 < len(sizes):
            cuts.append(i + 1)
            total = 0
    cuts.append(len(sizes))
    return cuts


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
