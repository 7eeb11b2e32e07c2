"""Chunks spilled to files: the build moves records through files, and only their names
through the runner.

Each chunk of encoded records (up to 4096 records or 8 MB, from one block) is written to a
file in the build's temporary folder by the step that made it, and the runner carries on with
(block, position, file, count): a few bytes a chunk. The shard writers read the chunks that
overlap their rank range, in rank order, one at a time. So no grouping step moves records, a
shard writer holds one chunk at a time instead of its whole shard, and the runner holds none.
(With the records in the runner's collections, apache-beam 2.77's runner with two worker
processes lost whole buffers of chunks at 1M records; and the in-process runner held every
record twice.)

A chunk file: `MAGIC`, the record count (8 bytes, little-endian), one kind byte per record, the
records' lengths (8 bytes each), then the records. Its name holds the block and the position of
its first record, so a retried step rewrites the same file with the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from tpufeed.beam.write import shard_files
from tpufeed.errors import SourceError

__all__ = ["MAGIC", "chunk_path", "delete_chunks", "read_chunk", "write_chunk"]

MAGIC = b"tpufeed-chunk-1\n"
_HEAD = len(MAGIC) + 8


def chunk_path(output: str, build_id: str, block: int, position: int) -> str:
    """Where the chunk of `block` that starts at `position` in it is spilled."""
    return shard_files.join(
        shard_files.temp_dir(output, build_id), f"chunk-{block:07d}-{position:012d}"
    )


def _encode(datas: Sequence[bytes], kinds: bytes) -> bytes:
    if len(datas) != len(kinds):
        raise ValueError(f"{len(datas)} records with {len(kinds)} kinds")
    lengths = np.fromiter((len(d) for d in datas), dtype="<u8", count=len(datas))
    return b"".join(
        [MAGIC, len(datas).to_bytes(8, "little"), bytes(kinds), lengths.tobytes(), *datas]
    )


def write_chunk(path: str, datas: Sequence[bytes], kinds: bytes) -> None:
    """Writes a chunk at `path` whole or not at all (a local temporary name renamed; an
    object upload is atomic)."""
    data = _encode(datas, kinds)
    if shard_files.is_remote(path):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(path, mime_type="application/octet-stream") as f:
            f.write(data)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_bytes(path: str) -> bytes:
    if not shard_files.is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        return f.read()


def read_chunk(
    path: str, count: int, start: int = 0, stop: int | None = None
) -> tuple[list[bytes], bytes]:
    """Records `start:stop` of the chunk at `path`, which must hold `count` records, and
    their kinds."""
    try:
        data = _read_bytes(path)
    except OSError as e:
        raise SourceError(
            f"cannot read the spilled chunk {path}: {e} (the build's temporary "
            "folder was removed or its disk failed mid-build)",
            path=path,
        ) from e
    n = int.from_bytes(data[len(MAGIC) : _HEAD], "little") if len(data) >= _HEAD else -1
    if not data.startswith(MAGIC) or n != count:
        raise SourceError(
            f"spilled chunk {path}: expected {count} records, the file "
            f"{'holds ' + str(n) if data.startswith(MAGIC) else 'is not a chunk'}"
            " (overwritten or truncated mid-build)",
            path=path,
        )
    lengths = np.frombuffer(data, dtype="<u8", count=n, offset=_HEAD + n)
    ends = np.cumsum(lengths) + (_HEAD + 9 * n)
    if (int(ends[-1]) if n else _HEAD) != len(data):
        raise SourceError(
            f"spilled chunk {path}: {len(data)} bytes, its lengths add up to "
            f"{int(ends[-1]) if n else _HEAD} (truncated mid-build)",
            path=path,
        )
    stop = n if stop is None else stop
    view = memoryview(data)
    begin = int(ends[start - 1]) if start else _HEAD + 9 * n
    records = []
    for end in ends[start:stop].tolist():
        records.append(bytes(view[begin:end]))
        begin = end
    return records, data[_HEAD + start : _HEAD + stop]


def delete_chunks(paths: Sequence[str]) -> None:
    """Deletes spilled chunks (once every shard is written); missing ones are fine."""
    if not paths:
        return
    if not shard_files.is_remote(paths[0]):
        for path in paths:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        return
    from apache_beam.io.filesystems import FileSystems

    found = [m.path for result in FileSystems.match(list(paths)) for m in result.metadata_list]
    if found:
        FileSystems.delete(found)
