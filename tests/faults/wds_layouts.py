"""Where the framing of WebDataset's decoded fields and gzip shards lies, for the parser fuzz
(tests/faults/parser_layouts.py's `LAYOUTS`): a shard's tenbin, cbor and msgpack fields (each
decoder of outside bytes, through the shard as users read it), a gzip shard (`.tgz`), and the
decompressed copy tpufeed derives from it (damaged: removed with a warning and made again).

Every shard is webdataset's own `TarWriter`'s; the `.tgz` is `tarfile`'s gzip of it, as
WebDataset's test shards are.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tests.faults.parser_layouts import Layout


def _samples() -> list[dict[str, Any]]:
    return [
        {
            "__key__": f"k{i}",
            "ten": [np.arange(i + 2, dtype=np.float32), np.full((2, 3), i, np.int16)],
            "cbor": {"i": i, "big": 2**70 + i, "list": [1.25, None, "x" * i], "b": b"ab"},
            "mp": {"i": i, "f": [1.5, "e", b"\x00\x01"], "none": None},
        }
        for i in range(3)
    ]


def _value(value: Any) -> Any:
    """`value` comparable with ==: arrays as their dtype, shape and bytes."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return sorted((repr(k), _value(v)) for k, v in value.items())
    return value


def _read_shard(path: str, folder: str) -> list[Any]:
    """Every sample of the shard at `path`, decoded, comparable."""
    from tpufeed.sources.webdataset.tar import TarShard

    shard = TarShard(path, index_dir=os.path.join(folder, "i"), copies=os.path.join(folder, "c"))
    try:
        samples = shard.read(np.arange(len(shard)))
    finally:
        shard.close()
    return [_value({k: v for k, v in s.items() if k != "__url__"}) for s in samples]


def _scratch() -> str:
    return tempfile.mkdtemp(prefix="tpufeed-layout-")


def _tar() -> bytes:
    import webdataset as wds

    work = _scratch()
    try:
        path = os.path.join(work, "d.tar")
        with wds.TarWriter(path, mtime=1_700_000_000.5) as sink:
            for sample in _samples():
                sink.write(sample)
        return Path(path).read_bytes()
    finally:
        shutil.rmtree(work)


def _records(name: str, data: bytes) -> list[Any]:
    work = _scratch()
    try:
        Path(work, name).write_bytes(data)
        return _read_shard(os.path.join(work, name), work)
    finally:
        shutil.rmtree(work)


def fields() -> Layout:
    """The tenbin, cbor and msgpack fields' bytes in a tar: tenbin's chunk framing and array
    headers, and every byte of the cbor and msgpack items. Neither the tar nor these formats
    check their data, so a flip may read as other values ("different"); what must hold is a
    named error or values, within memory, never a hang."""
    from tests.faults.parser_layouts import Layout

    data = _tar()
    regions: list[tuple[int, int]] = []
    cuts: list[int] = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            start, size = member.offset_data, member.size
            cuts += [start + size // 2]
            if member.name.endswith(".ten"):
                regions += _tenbin_framing(data[start : start + size], start)
            elif member.name.endswith((".cbor", ".mp")):
                regions.append((start, start + size))
    records = _records("d.tar", data)
    read = lambda folder: _read_shard(os.path.join(folder, "d.tar"), folder)  # noqa: E731
    return Layout("d.tar", data, records, regions, sorted(cuts), read, checksummed=False)


def _tenbin_framing(field: bytes, base: int) -> list[tuple[int, int]]:
    """Each chunk's magic and length, and each array header chunk's whole bytes."""
    regions, at, chunk = [], 0, 0
    while at < len(field):
        length = int.from_bytes(field[at + 8 : at + 16], "little")
        regions.append((base + at, base + at + 16))
        if chunk % 2 == 0:  # an array's header: dtype, info, rank, dimensions
            regions.append((base + at + 16, base + at + 16 + length))
        at += 16 + -(-length // 64) * 64
        chunk += 1
    return regions


def _gzipped(tar: bytes) -> bytes:
    """`tar` as `tarfile` writes a gzip tar ("w:gz")."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(tar)) as src,
        tarfile.open(fileobj=out, mode="w:gz") as dst,
    ):
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member))
    return out.getvalue()


def tgz() -> Layout:
    """A gzip shard: its header (magic, method, flags, time), the first bytes of its deflate
    stream and its trailer (CRC-32 and length, which the copy is checked against as it is
    made); cut at each of their edges and within the stream."""
    from tests.faults.parser_layouts import Layout

    data = _gzipped(_tar())
    size = len(data)
    regions = [(0, 10), (10, 40), (size - 8, size)]
    cuts = [1, 2, 4, 10, 11, 40, size // 2, size - 8, size - 4, size - 1]
    records = _records("d.tgz", data)
    read = lambda folder: _read_shard(os.path.join(folder, "d.tgz"), folder)  # noqa: E731
    return Layout("d.tgz", data, records, regions, cuts, read)


def tgz_copy() -> Layout:
    """The decompressed copy of a gzip shard, a derived file: damaged or cut, it is removed
    with a warning and made again; its trailer's last 4 bytes (padding) are not flipped."""
    from tests.faults.parser_layouts import Layout

    shard = _gzipped(_tar())

    def prepare(folder: str) -> None:  # the copy of this very shard (its inode is in it)
        Path(folder, "d.tgz").write_bytes(shard)
        _read_shard(os.path.join(folder, "d.tgz"), folder)

    def target(folder: str) -> str:
        (path,) = Path(folder, "c").glob("*d.tgz*.tar")
        return str(path)

    work = _scratch()
    try:
        prepare(work)
        data = Path(target(work)).read_bytes()
        records = _read_shard(os.path.join(work, "d.tgz"), work)
    finally:
        shutil.rmtree(work)
    size = len(data)
    regions = [(0, 512), (size // 2, size // 2 + 512), (size - 24, size - 4)]
    cuts = [0, 512, size // 2, size - 24, size - 12, size - 1]
    read = lambda folder: _read_shard(os.path.join(folder, "d.tgz"), folder)  # noqa: E731
    return Layout(
        "copy", data, records, regions, cuts, read, prepare=prepare, derived=True, target=target
    )


WDS_LAYOUTS = {
    "webdataset-fields": fields,
    "webdataset-tgz": tgz,
    "webdataset-tgz-copy": tgz_copy,
}
