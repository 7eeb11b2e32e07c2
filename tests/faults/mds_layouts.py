"""Where the headers and framing of MDS files lie, for the parser fuzz
(tests/faults/parser_layouts.py's `LAYOUTS`): a shard's count, offset table and each sample's
column sizes; `index.json`'s JSON; a zstd shard's frame; and the decompressed copy tpufeed
derives from it (damaged: removed with a warning and made again).

Every file is MosaicML Streaming's own MDSWriter's (tests/data/mds/, see write_fixtures.py
there), copied into the case's folder.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tests.faults.parser_layouts import Layout

DATA = Path(__file__).resolve().parents[1] / "data" / "mds"


def _files(name: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((DATA / name).iterdir())}


def _value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


def _read(folder: str) -> list[Any]:
    """Every sample of the MDS folder, comparable (arrays as their dtype, shape and bytes)."""
    import tpufeed

    source = tpufeed.Dataset.from_mds(folder, cache_dir=os.path.join(folder, "c")).source
    samples = [source[i] for i in range(len(source))]
    return [tuple(sorted((k, _value(v)) for k, v in s.items())) for s in samples]


def _scratch() -> str:
    return tempfile.mkdtemp(prefix="tpufeed-layout-")


def _pristine(files: dict[str, bytes]) -> list[Any]:
    work = _scratch()
    try:
        for name, data in files.items():
            Path(work, name).write_bytes(data)
        return _read(work)
    finally:
        shutil.rmtree(work)


def shard() -> Layout:
    """An uncompressed shard whose index holds no hashes (nested/part-a): only its framing
    guards it. A flip in a sample's bytes reads as those bytes (no checksum), so only the
    framing is flipped: the count, the offset table, each sample's column sizes."""
    from tests.faults.parser_layouts import Layout

    files = _files("nested/part-a")
    name = "shard.00000.mds"
    data = files.pop(name)
    (count,) = struct.unpack_from("<I", data)
    offsets = struct.unpack_from(f"<{count + 1}I", data, 4)
    variable = 2  # img and text: each sample starts with their uint32 sizes
    regions = [(0, 4), (4, 4 + 4 * (count + 1))]
    regions += [(start, start + 4 * variable) for start in offsets[:-1]]
    cuts = {1, 4, 8, 4 + 4 * (count + 1), len(data) - 1}
    cuts |= {at for start in offsets[:-1] for at in (start, start + 4, start + 4 * variable)}
    records = _pristine({**files, name: data})
    return Layout(name, data, records, regions, sorted(cuts), _read, extra=files, checksummed=False)


def index() -> Layout:
    """`index.json` (no checksum): a flip in a name or a digit may read as another value."""
    from tests.faults.parser_layouts import Layout

    files = _files("nested/part-a")
    data = files.pop("index.json")
    marks = [i for i, c in enumerate(data.decode()) if c in '{}[]":,0123456789']
    records = _pristine({**files, "index.json": data})
    regions = [(i, i + 1) for i in marks]
    return Layout(
        "index.json", data, records, regions, marks, _read, extra=files, checksummed=False
    )


def zstd_shard() -> Layout:
    """A zstd shard (its hash, xxh3_64, in the index): its frame header and the end of its
    last block; cut at each of their edges."""
    from tests.faults.parser_layouts import Layout

    files = _files("zstd")
    name = "shard.00000.mds.zstd"
    data = files.pop(name)
    records = _pristine({**files, name: data})
    regions = [(0, 18), (len(data) - 12, len(data))]
    cuts = [4, 5, 6, 10, 18, len(data) // 2, len(data) - 4, len(data) - 1]
    return Layout(name, data, records, regions, cuts, _read, extra=files)


def copy() -> Layout:
    """The decompressed copy of a zstd shard, a derived file: damaged or cut, it is removed
    with a warning and made again; its trailer's last 4 bytes (padding) are not flipped."""
    from tests.faults.parser_layouts import Layout

    files = _files("zstd")

    def prepare(folder: str) -> None:  # the copy of these very files (their inode is in it)
        for name, data in files.items():
            Path(folder, name).write_bytes(data)
        _read(folder)

    work = _scratch()
    prepare(work)
    (found,) = Path(work, "c", "mds").glob("*-shard.00000.mds.zstd.raw")
    data = found.read_bytes()
    records = _read(work)
    shutil.rmtree(work)
    (count,) = struct.unpack_from("<I", data)
    head, size = 4 + 4 * (count + 1), len(data)
    regions = [(0, head), (size - 24, size - 4)]
    cuts = [0, 4, head, size // 2, size - 24, size - 12, size - 1]

    def target(folder: str) -> str:
        (path,) = Path(folder, "c", "mds").glob("*-shard.00000.mds.zstd.raw")
        return str(path)

    return Layout(
        "copy", data, records, regions, cuts, _read, prepare=prepare, derived=True, target=target
    )


MDS_LAYOUTS = {
    "mds": shard,
    "mds-index": index,
    "mds-zstd": zstd_shard,
    "mds-copy": copy,
}
