"""Where the headers and framing of each format lie, in files written by the formats' own
writers: the byte ranges a fuzz flips bytes in, and the offsets it cuts a file at.

Each `Layout` is one pristine file (or folder) with the records written into it, the regions
of its headers and framing, the cut points (every header boundary), and how tpufeed reads it
back. tests/faults/parser_cases.py damages it and reads it; this module does not import pytest.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.faults.mds_layouts import MDS_LAYOUTS
from tests.faults.wds_layouts import WDS_LAYOUTS

Region = tuple[int, int]  # [start, end) byte offsets


@dataclass
class Layout:
    """A pristine file of `name` under a folder, and what a fuzz needs to damage and read it.

    `read(folder)` reads every record of the damaged copy in `folder` with tpufeed; `prefix_ok`:
    a cut at a record boundary leaves a valid, shorter file (the format has no count), so the
    records read may be a prefix of `records`."""

    name: str
    data: bytes
    records: list[Any]
    regions: list[Region]
    cuts: list[int]
    read: Callable[[str], list[Any]]
    extra: dict[str, bytes] = field(default_factory=dict)  # other files of the folder
    prefix_ok: bool = False
    prepare: Callable[[str], None] | None = None  # writes the folder (default: data, extra)
    # False for formats that hold no checksum of their bytes (JSONL, CSV, a JPEG's header):
    # there a flipped byte may read as other values, which no reader can tell from data.
    checksummed: bool = True
    # A derived file (an index): damaged, it must be removed with a warning and made again.
    derived: bool = False
    # Where the file lies once `prepare` ran, if its name is not `name` (a name keyed by identity).
    target: Callable[[str], str] | None = None


def _rng_records(seed: int, n: int, longest: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(k)) for k in rng.integers(0, longest, n)]


# -- TFRecord ---------------------------------------------------------------------------------


def tfrecord() -> Layout:
    from tpufeed.sources.tfrecord import TFRecordFile, write_tfrecords

    records = _rng_records(1, 10, 120)
    data = _written(lambda path: write_tfrecords(path, records))
    regions, cuts, pos = [], [], 0
    for record in records:
        end = pos + 12 + len(record)
        regions += [(pos, pos + 12), (end, end + 4)]  # length + its CRC; the data's CRC
        cuts += [pos, pos + 4, pos + 8, pos + 12, end, end + 2]
        pos = end + 4
    cuts.append(pos - 1)

    def read(folder: str) -> list[bytes]:
        f = TFRecordFile(os.path.join(folder, "d.tfrecord"), index_dir=os.path.join(folder, "i"))
        try:
            return f.read(np.arange(len(f)))
        finally:
            f.close()

    return Layout("d.tfrecord", data, records, regions, cuts, read, prefix_ok=True)


def tfrecord_stream() -> Layout:
    """The stream reader `tpufeed build` reads TFRecord inputs with."""
    from tpufeed.sources.tfrecord.framing import read_stream

    layout = tfrecord()

    def read(folder: str) -> list[bytes]:
        path = os.path.join(folder, "d.tfrecord")
        with open(path, "rb") as f:
            return list(read_stream(f, path))

    layout.read = read
    return layout


def tfrecord_index() -> Layout:
    """The derived offset index beside a TFRecord file: damaged, it is made again."""
    from tpufeed.sources.tfrecord import TFRecordFile, write_tfrecords
    from tpufeed.sources.tfrecord.index import INDEX_SUFFIX

    records = _rng_records(2, 10, 120)

    def prepare(folder: str) -> None:  # the index of this very file (its inode is in it)
        path = os.path.join(folder, "d.tfrecord")
        write_tfrecords(path, records)
        TFRecordFile(path).close()

    work = _scratch()
    prepare(work)
    index = open(os.path.join(work, "d.tfrecord" + INDEX_SUFFIX), "rb").read()
    shutil.rmtree(work)

    def read(folder: str) -> list[bytes]:
        f = TFRecordFile(os.path.join(folder, "d.tfrecord"))
        try:
            return f.read(np.arange(len(f)))
        finally:
            f.close()

    head, trailer, size = 48, 24, len(index)
    # The trailer's last 4 bytes are padding, which no reader looks at: not flipped.
    regions = [(0, head), (head, size - trailer), (size - trailer, size - 4)]
    cuts = [0, 8, 40, head, size - trailer, size - 12, size - 4, size - 1]
    name = "d.tfrecord" + INDEX_SUFFIX
    return Layout(name, index, records, regions, cuts, read, prepare=prepare, derived=True)


# -- ArrayRecord ------------------------------------------------------------------------------

_BLOCK = 1 << 16
_BLOCK_HEADER = 24
_CHUNK_HEADER = 40


def array_record() -> Layout:
    from tpufeed.sources.array_record import ArrayRecordFile, write_array_records

    records = _rng_records(3, 12, 200)
    data = _written(lambda path: write_array_records(path, records, options="group_size:1"))

    def read(folder: str) -> list[bytes]:
        f = ArrayRecordFile(os.path.join(folder, "d.array_record"))
        try:
            return f.read(np.arange(len(f)))
        finally:
            f.close()

    regions, cuts = riegeli_layout(data)
    return Layout("d.array_record", data, records, regions, cuts, read)


def riegeli_layout(data: bytes) -> tuple[list[Region], list[int]]:
    """Every block header and chunk header of a Riegeli file (with the data of its footer and
    postscript chunks, which hold no records' bytes), and the cuts at each of their edges."""
    regions = [(b, b + _BLOCK_HEADER) for b in range(0, len(data), _BLOCK)]
    cuts = sorted({edge for b, e in regions for edge in (b, e)})
    pos = _BLOCK_HEADER
    chunks = []
    while len(data) - pos >= _CHUNK_HEADER:
        if pos % _BLOCK == 0:
            pos += _BLOCK_HEADER
        header = _logical(data, pos, _CHUNK_HEADER)
        size = int.from_bytes(header[8:16], "little")
        chunks.append((pos, chr(header[24]), size))
        cuts += [pos + k for k in (0, 8, 16, 24, 25, 32)]
        pos = _advance(pos, _CHUNK_HEADER + size)
    for start, kind, size in chunks:
        regions.append((start, start + _CHUNK_HEADER))
        if kind == "r" and start > chunks[-4][0]:  # the footer's and the postscript's data
            regions.append((start + _CHUNK_HEADER, start + _CHUNK_HEADER + size))
    return regions, sorted(set(c for c in cuts if 0 < c < len(data)))


def _advance(pos: int, n: int) -> int:
    while n > 0:
        if pos % _BLOCK == 0:
            pos += _BLOCK_HEADER
            continue
        step = min(_BLOCK - pos % _BLOCK, n)
        pos, n = pos + step, n - step
    return pos


def _logical(data: bytes, pos: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        if pos % _BLOCK == 0:
            pos += _BLOCK_HEADER
            continue
        take = min(_BLOCK - pos % _BLOCK, n - len(out))
        out += data[pos : pos + take]
        pos += take
    return out


# -- Parquet ----------------------------------------------------------------------------------


def parquet() -> Layout:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tpufeed.sources.parquet.source import ParquetFile

    n = 24
    table = pa.table(
        {
            "i": pa.array(np.arange(n, dtype=np.int64) * 7),
            "s": pa.array([f"row-{k}" for k in range(n)]),
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=8, write_page_checksum=True)
    data = buffer.getvalue()
    records = [{"i": int(k * 7), "s": f"row-{k}"} for k in range(n)]
    footer = int.from_bytes(data[-8:-4], "little")
    meta = pq.read_metadata(io.BytesIO(data))
    regions = [(0, 4), (len(data) - 8 - footer, len(data))]
    cuts = {4, len(data) - 8 - footer, len(data) - 8, len(data) - 4, len(data) - 1}
    for g in range(meta.num_row_groups):
        for c in range(meta.row_group(g).num_columns):
            column = meta.row_group(g).column(c)
            for page in (column.dictionary_page_offset, column.data_page_offset):
                if page:
                    regions.append((page, page + 24))  # a page header's thrift fields
                    cuts |= {page, page + 2, page + 12}

    def read(folder: str) -> list[dict[str, Any]]:
        f = ParquetFile(os.path.join(folder, "d.parquet"))
        try:
            rows = f.read(np.arange(len(f)))
        finally:
            f.close()
        return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]

    return Layout("d.parquet", data, records, regions, sorted(cuts), read)


# -- WebDataset tar shards -------------------------------------------------------------------


def _wds_tar(path: str) -> None:
    """A shard as WebDataset's `TarWriter` writes it: a pax header before every member."""
    import webdataset as wds

    with wds.TarWriter(path, mtime=1_700_000_000.5) as sink:
        for i in range(6):
            key = f"k{i}/" + "long-folder-name/" * (4 * (i % 2))  # pax paths past 100 bytes
            sink.write({"__key__": f"{key}{i:03d}", "txt": f"t{i}", "bin": bytes(i * 97)})


def _wds_read(path: str, index_dir: str | None) -> list[dict[str, Any]]:
    from tpufeed.sources.webdataset.tar import TarShard

    shard = TarShard(path, index_dir=index_dir, decode=False)
    samples = shard.read(np.arange(len(shard)))
    return [{k: v for k, v in s.items() if k != "__url__"} for s in samples]


def webdataset() -> Layout:
    """Every 512-byte header of a tar shard (pax headers and members' own): each has a
    checksum, so a flip there is refused by name; the tar's data and pax records are
    fuzzed by tests/sources/test_webdataset_headers.py."""
    import tarfile

    data = _written(_wds_tar)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [(m.offset, m.offset_data, m.size) for m in tar]
    regions, cuts = [], []
    for start, at, size in members:
        regions += [(start, start + 512), (at - 512, at)]
        cuts += [start, start + 100, start + 512, at - 512, at - 256, at, at + size // 2]
    end = members[-1][1] + -(-members[-1][2] // 512) * 512  # the end-of-archive block
    cuts += [end]
    records = _wds_read_bytes(data)
    read = lambda folder: _wds_read(os.path.join(folder, "d.tar"), os.path.join(folder, "i"))  # noqa: E731
    return Layout("d.tar", data, records, regions, sorted(set(cuts) - {0}), read)


def _wds_read_bytes(data: bytes) -> list[dict[str, Any]]:
    work = _scratch()
    try:
        with open(os.path.join(work, "d.tar"), "wb") as f:
            f.write(data)
        return _wds_read(os.path.join(work, "d.tar"), os.path.join(work, "i"))
    finally:
        shutil.rmtree(work)


def webdataset_index() -> Layout:
    """The derived sample index beside a tar shard: damaged, it is made again."""
    from tpufeed.sources.webdataset.index_file import INDEX_SUFFIX

    def prepare(folder: str) -> None:  # the index of this very tar (its inode is in it)
        _wds_tar(os.path.join(folder, "d.tar"))
        _wds_read(os.path.join(folder, "d.tar"), None)

    work = _scratch()
    prepare(work)
    index = open(os.path.join(work, "d.tar" + INDEX_SUFFIX), "rb").read()
    records = _wds_read(os.path.join(work, "d.tar"), None)
    shutil.rmtree(work)
    head, trailer, size = 64, 24, len(index)
    # The trailer's last 4 bytes are padding, which no reader looks at: not flipped.
    regions = [(0, head), (head, size - trailer), (size - trailer, size - 4)]
    cuts = [0, 8, 40, head, size // 2, size - trailer, size - 12, size - 4, size - 1]
    read = lambda folder: _wds_read(os.path.join(folder, "d.tar"), None)  # noqa: E731
    name = "d.tar" + INDEX_SUFFIX
    return Layout(name, index, records, regions, cuts, read, prepare=prepare, derived=True)


# -- built datasets (Dataset.open) ------------------------------------------------------------


def built(file_format: str) -> Layout:
    """A built dataset: its manifest ("manifest") or one of its shards (a file format)."""
    from tests.dataset_folder import make_dataset

    records = [[bytes([s, k]) * (k + 1) for k in range(6)] for s in range(2)]
    work = _scratch()
    shard_format = "array_record" if file_format == "manifest" else file_format
    manifest = make_dataset(work, records, shard_format)
    files = {name: open(os.path.join(work, name), "rb").read() for name in os.listdir(work)}
    shutil.rmtree(work)
    name = "manifest.json" if file_format == "manifest" else manifest["shards"][1]["path"]
    data = files.pop(name)

    def read(folder: str) -> list[bytes]:
        import tpufeed

        source = tpufeed.Dataset.open(folder).source
        try:
            return source.__getitems__(list(range(len(source))))
        finally:
            source.close()

    if file_format == "manifest":
        regions = [(0, len(data))]
        cuts = [i for i, c in enumerate(data) if chr(c) in '{}[],:"'] + [len(data) - 1]
    elif file_format == "tfrecord":
        regions, cuts = [], []
        pos = 0
        for record in records[1]:
            end = pos + 12 + len(record)
            regions += [(pos, pos + 12), (end, end + 4)]
            cuts += [pos, pos + 8, pos + 12, end]
            pos = end + 4
    else:
        regions, cuts = riegeli_layout(data)
    flat = [r for shard in records for r in shard]
    return Layout(name, data, flat, regions, cuts, read, extra=files)


# -- what the build reads: JSONL and CSV ------------------------------------------------------


def text_input(kind: str) -> Layout:
    """A JSONL or CSV input of `tpufeed build`; its framing: quotes, separators, line ends."""
    from tpufeed.beam.read.inputs import InputFile, Malformed, read_input

    rows = [{"id": k, "name": f"n{k}", "score": k / 4} for k in range(12)]
    if kind == "jsonl":
        text = "".join(json.dumps(row) + "\n" for row in rows)
        records: list[Any] = rows
        framing = '{}":,\n'
    else:
        text = "id,name,score\n" + "".join(f'{r["id"]},"{r["name"]}",{r["score"]}\n' for r in rows)
        records = [{"id": str(r["id"]), "name": r["name"], "score": str(r["score"])} for r in rows]
        framing = ',"\n'
    data = text.encode()
    name = f"d.{kind}"

    def read(folder: str) -> list[Any]:
        out = []
        for _, origin, record in read_input(InputFile(os.path.join(folder, name), kind)):
            if isinstance(record, Malformed):
                raise_named(origin, str(record))
            out.append(record)
        return out

    marks = [i for i, c in enumerate(data) if chr(c) in framing]
    regions = [(i, i + 1) for i in marks]
    return Layout(name, data, records, regions, marks, read, prefix_ok=True, checksummed=False)


def raise_named(origin: str, why: str) -> None:
    """A bad input record, as the build stops on it: a named error."""
    from tpufeed.errors import SourceError

    raise SourceError(why, path=origin)


# -- JPEG headers -----------------------------------------------------------------------------


def jpeg() -> Layout:
    """A JPEG's markers and segment lengths, walked by `transforms.region.image_size`."""
    from PIL import Image

    from tpufeed.transforms.region import decode_region, image_size

    pixels = np.random.default_rng(4).integers(0, 255, (40, 56, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    data = buffer.getvalue()
    regions, cuts, at = [], [], 2
    while at + 4 <= len(data) and data[at] == 0xFF and data[at + 1] != 0xDA:
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        regions.append((at, at + min(length + 2, 24)))
        cuts += [at, at + 2, at + 4, at + 2 + length]
        at += 2 + length
    regions.append((at, at + 14))  # start of scan

    def read(folder: str) -> list[Any]:
        encoded = open(os.path.join(folder, "d.jpg"), "rb").read()
        size = image_size(encoded)
        crop = decode_region(encoded, (0.0, 0.0, float(size[0]), float(size[1])), (8, 8))
        return [size, crop.shape]

    expected = [(40, 56), (8, 8, 3)]
    return Layout("d.jpg", data, expected, regions, cuts, read, checksummed=False)


# -- helpers ----------------------------------------------------------------------------------


def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="tpufeed-layout-")


def _written(write: Callable[[str], Any]) -> bytes:
    work = _scratch()
    try:
        path = os.path.join(work, "file")
        write(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(work)


LAYOUTS: dict[str, Callable[[], Layout]] = {
    "tfrecord": tfrecord,
    "tfrecord-stream": tfrecord_stream,
    "tfrecord-index": tfrecord_index,
    "array_record": array_record,
    "parquet": parquet,
    "built-manifest": lambda: built("manifest"),
    "built-array_record": lambda: built("array_record"),
    "built-tfrecord": lambda: built("tfrecord"),
    "jsonl": lambda: text_input("jsonl"),
    "csv": lambda: text_input("csv"),
    "jpeg": jpeg,
    "webdataset": webdataset,
    "webdataset-index": webdataset_index,
    **MDS_LAYOUTS,
    **WDS_LAYOUTS,
}
