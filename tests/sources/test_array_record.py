"""ArrayRecordFile / ArrayRecordSource: round trips, path forms, damaged files, pickling, Grain."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pickle
import random
import struct

import grain
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    RecordIndexError,
    SourceNotFoundError,
)
from tpufeed.sources.array_record import ArrayRecordFile, ArrayRecordSource, write_array_records
from tpufeed.sources.array_record.structure import structure_problem

BLOCK = 1 << 16


def write_with_array_record(path, records, options: str) -> None:
    """Writes with array_record's own writer, so the reader is not tested against itself."""
    writer = ArrayRecordWriter(os.fspath(path), options)
    for record in records:
        writer.write(record)
    writer.close()


def mixed_records(rng: random.Random, n: int) -> list[bytes]:
    """`n` records of varied lengths, including an empty one and a 100 KiB one."""
    records = [b"", rng.randbytes(100 * 1024)]
    records += [rng.randbytes(rng.choice([1, 7, 300, 5000])) for _ in range(n - 2)]
    rng.shuffle(records)
    return records


def read_all(path) -> list[bytes]:
    f = ArrayRecordFile(path)
    try:
        return f.read(np.arange(len(f)))
    finally:
        f.close()


# --- round trips -----------------------------------------------------------------------------


# "" is the writer's default; in array-record 0.8.6 that is group_size:1, despite the docs'
# 65536, so 65536 is listed explicitly.
@pytest.mark.parametrize("options", ["group_size:1", "", "group_size:65536", "group_size:7"])
def test_records_read_back_byte_identical_in_random_order(tmp_path, options):
    rng = random.Random(options)
    expected: list[bytes] = []
    for i, n in enumerate([40, 0, 25, 60]):  # an empty file among them
        records = mixed_records(rng, n) if n else []
        write_with_array_record(tmp_path / f"part-{i}.array_record", records, options)
        expected += records
    source = ArrayRecordSource(str(tmp_path / "part-*.array_record"))
    assert len(source) == len(expected) == 125
    order = np.random.default_rng(0).permutation(len(expected))
    assert source.__getitems__(order) == [expected[i] for i in order]
    repeats = [5, 5, 124, 0, 5]
    assert source.__getitems__(repeats) == [expected[i] for i in repeats]
    assert [source[i] for i in range(len(source))] == expected
    assert source.__getitems__([]) == []
    source.close()


@pytest.mark.parametrize("record_bytes, per_record_reads", [(300, True), (64 * 1024, False)])
def test_both_read_paths_return_the_same_records(tmp_path, record_bytes, per_record_reads):
    # Small records of group-size-1 files are read one `read(i, i + 1)` at a time (faster than
    # array_record's batched read); large ones through the batched read. Both must agree.
    rng = random.Random(record_bytes)
    records = [rng.randbytes(record_bytes) for _ in range(30)]
    path = tmp_path / "f.array_record"
    write_with_array_record(path, records, "group_size:1")
    f = ArrayRecordFile(path)
    indices = np.array([29, 0, 13, 13, 7])
    assert f.read(indices) == [records[i] for i in indices]
    assert f._per_record_reads is per_record_reads  # the path this case means to cover


@pytest.mark.parametrize("second_options", ["group_size:1", "group_size:65536"])
def test_files_of_one_record_a_chunk_are_read_by_array_records_own_range_reads(
    tmp_path, second_options
):
    # Where every file is local and of one small record a chunk, the source calls each file's
    # array_record `read(i, i + 1)` in its own loop (no Python call a record); a file read
    # otherwise among them sends every file through its own `read`. Both give the same records.
    rng = random.Random(second_options)
    expected = []
    for i, options in enumerate(["group_size:1", second_options]):
        records = [rng.randbytes(rng.randint(0, 300)) for _ in range(20)]
        write_with_array_record(tmp_path / f"part-{i}.array_record", records, options)
        expected += records
    source = ArrayRecordSource(str(tmp_path / "part-*.array_record"))
    order = [39, 0, 20, 19, 5, 5, 33, 0]
    assert source.__getitems__(order) == [expected[i] for i in order]
    assert source._by_ranges is (second_options == "group_size:1")
    assert bool(source._record_readers) is (second_options == "group_size:1")
    assert source.files[0].range_reader()(3, 4) == [expected[3]]
    assert source.files[0].record_reader()(3) == expected[3]
    source.close()


def test_empty_valid_file_has_zero_records(tmp_path):
    for options in ["group_size:1", ""]:
        path = tmp_path / f"empty{options}.array_record"
        write_with_array_record(path, [], options)
        assert len(ArrayRecordFile(path)) == 0
        source = ArrayRecordSource(str(path))
        assert len(source) == 0
        with pytest.raises(RecordIndexError):
            source[0]


# --- path forms ------------------------------------------------------------------------------


@pytest.fixture
def three_files(tmp_path):
    rng = random.Random(3)
    paths, expected = [], []
    for i in range(3):
        records = [rng.randbytes(rng.randint(0, 200)) for _ in range(10 + i)]
        path = str(tmp_path / f"data-{i:05d}.array_record")
        write_array_records(path, records)
        paths.append(path)
        expected.append(records)
    return paths, expected


def test_glob_list_and_single_path(three_files, tmp_path):
    paths, expected = three_files
    by_glob = ArrayRecordSource(str(tmp_path / "data-*.array_record"))
    by_list = ArrayRecordSource(list(reversed(paths)))
    single = ArrayRecordSource(paths[1])
    assert [f.path for f in by_glob.files] == paths
    assert [by_glob[i] for i in range(len(by_glob))] == sum(expected, [])
    assert [by_list[i] for i in range(len(by_list))] == sum(reversed(expected), [])
    assert [single[i] for i in range(len(single))] == expected[1]
    assert by_glob.locate(10) == (paths[1], 0)


def test_empty_glob_and_missing_file_name_the_path(tmp_path):
    pattern = str(tmp_path / "nothing-*.array_record")
    with pytest.raises(SourceNotFoundError, match="nothing-"):
        ArrayRecordSource(pattern)
    missing = str(tmp_path / "missing.array_record")
    with pytest.raises(SourceNotFoundError) as caught:
        ArrayRecordSource([missing])
    assert missing in str(caught.value) and caught.value.path == missing
    with pytest.raises(SourceNotFoundError) as caught:
        len(ArrayRecordFile(missing))  # the file on its own, not through expand_paths
    assert missing in str(caught.value)


# --- damaged files ---------------------------------------------------------------------------


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def footer_offset(data: bytes) -> int:
    """Reads the footer offset from the uncompressed postscript chunk in the last block."""
    pos = len(data) - BLOCK + 24 + 40  # block header, chunk header
    assert data[pos] == 0, "postscript chunk is expected uncompressed"
    sizes_len, pos = varint(data, pos + 1)
    pos += sizes_len
    assert data[pos] == 0x08  # field 1 (footer_offset) of the first RiegeliPostscript copy
    return varint(data, pos + 1)[0]


_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _CRC32C_TABLE.append(_c)


def masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_bytes(records: list[bytes]) -> bytes:
    out = bytearray()
    for record in records:
        length = struct.pack("<Q", len(record))
        out += length + struct.pack("<I", masked_crc32c(length))
        out += record + struct.pack("<I", masked_crc32c(record))
    return bytes(out)


@pytest.fixture(scope="module")
def valid_file(tmp_path_factory) -> tuple[bytes, list[bytes]]:
    """Bytes of a valid multi-block file of 200 records (one record per chunk), and its records."""
    rng = random.Random(7)
    records = [rng.randbytes(rng.randint(0, 3000)) for _ in range(200)]
    path = tmp_path_factory.mktemp("valid") / "valid.array_record"
    write_with_array_record(path, records, "group_size:1")
    data = path.read_bytes()
    assert len(data) % BLOCK == 0 and len(data) >= 4 * BLOCK  # data crosses block boundaries
    return data, records


def flip(data: bytes, pos: int) -> bytes:
    out = bytearray(data)
    out[pos] ^= 0x10
    return bytes(out)


# Each damaged variant of the valid file, and where the damage must be reported.
DAMAGE_AT_OPEN = {
    "zero-length": lambda d: b"",
    "cut in half": lambda d: d[: len(d) // 2],
    "cut at a block boundary": lambda d: d[:-BLOCK],
    "minus 1 byte": lambda d: d[:-1],
    "header only": lambda d: d[:64],
    "first block only": lambda d: d[:BLOCK],
    "bytes appended": lambda d: d + b"\0" * 100,
    "random bytes": lambda d: random.Random(1).randbytes(len(d)),
    "signature then random bytes": lambda d: d[:64] + random.Random(2).randbytes(len(d) - 64),
    "zeroed postscript block": lambda d: d[:-BLOCK] + bytes(BLOCK),
    "TFRecord": lambda d: tfrecord_bytes([random.Random(3).randbytes(1000) for _ in range(140)]),
    # The reader never checks the signature; the records would read fine, but the bytes are
    # damaged and tpufeed says so.
    "flipped signature byte": lambda d: flip(d, 10),
    "flipped postscript chunk header": lambda d: flip(d, len(d) - BLOCK + 24 + 8),
    "flipped postscript data": lambda d: flip(d, len(d) - BLOCK + 64 + 3),
    "flipped footer chunk header": lambda d: flip(d, footer_offset(d) + 16),
    "flipped footer data": lambda d: flip(d, footer_offset(d) + 40 + 5),
}


@pytest.mark.parametrize("case", sorted(DAMAGE_AT_OPEN))
def test_damaged_file_raises_at_open_naming_the_path(tmp_path, valid_file, case):
    path = tmp_path / "damaged.array_record"
    path.write_bytes(DAMAGE_AT_OPEN[case](valid_file[0]))
    with pytest.raises(CorruptDataError) as caught:
        ArrayRecordSource(str(path))
    assert str(path) in str(caught.value) and caught.value.path == str(path)


@pytest.mark.parametrize("cut", ["half", "half + 1000", "one block short"])
def test_cut_file_is_reported_as_truncated(tmp_path, valid_file, cut):
    data = valid_file[0]
    size = {
        "half": len(data) // 2,
        "half + 1000": len(data) // 2 + 1000,
        "one block short": len(data) - BLOCK,
    }[cut]
    path = tmp_path / "cut.array_record"
    path.write_bytes(data[:size])
    # The hazard this module exists for: array_record itself reports an empty file, no error.
    reader = ArrayRecordReader(str(path), "readahead_buffer_size:0")
    assert reader.num_records() == 0
    with pytest.raises(CorruptDataError, match="truncated") as caught:
        len(ArrayRecordFile(path))
    assert str(path) in str(caught.value) and f"{size:,} bytes" in str(caught.value)


@pytest.mark.parametrize("options", ["group_size:1", "group_size:65536"])
def test_damaged_record_raises_at_read_naming_the_record(tmp_path, options):
    rng = random.Random(options)
    records = [rng.randbytes(1000) for _ in range(20)]
    path = tmp_path / "f.array_record"
    write_with_array_record(path, records, options)
    # The first data chunk follows the 64-byte signature; its data starts after a 40-byte header.
    path.write_bytes(flip(path.read_bytes(), 64 + 40 + 20))
    source = ArrayRecordSource(str(path))
    assert len(source) == 20  # the footer is intact, so opening succeeds
    with pytest.raises(CorruptDataError) as caught:
        source.__getitems__([3, 1, 0, 2])
    error = caught.value
    assert error.path == str(path) and str(path) in str(error)
    if options == "group_size:1":
        assert error.record == 0 and "record 0 " in str(error)
        assert source.__getitems__([3, 1, 2]) == [records[3], records[1], records[2]]
    else:  # all 20 records share the damaged chunk: the first one asked for is named
        assert error.record == 3


def test_no_damage_reads_back_wrong_records(tmp_path, valid_file):
    # Sweep: truncations and bit flips all over the file. Each variant must raise
    # CorruptDataError (at open or at read) or read back exactly the original records.
    data, records = valid_file
    path = tmp_path / "f.array_record"
    variants = [data[:cut] for cut in range(0, len(data), 4093)]
    variants += [flip(data, pos) for pos in range(0, len(data), 331)]
    harmless = []
    for variant in variants:
        path.write_bytes(variant)
        try:
            got = read_all(path)
        except CorruptDataError as e:
            assert str(path) in str(e)
            continue
        assert got == records
        harmless.append(variant)
    # Undetectable, and harmless: the padding written to reach 64 KiB boundaries (zero bytes and
    # the headers of padding chunks) is never read by array_record, and checking it would need
    # Riegeli's HighwayHash. Every flip that was not caught landed in such padding.
    assert harmless and all(len(v) == len(data) for v in harmless)


def test_undetectable_harmless_damage_is_documented(tmp_path, valid_file):
    # Flips in the zero padding after the postscript, and an appended copy of the last block,
    # leave every record readable and identical; no check of the records can tell.
    data, records = valid_file
    path = tmp_path / "f.array_record"
    for variant in [flip(data, len(data) - 100), data + data[-BLOCK:]]:
        path.write_bytes(variant)
        assert read_all(path) == records


def test_structure_problem_without_io():
    signature = bytes.fromhex("83af70d10d884a3f00000000000000004000000000000000")
    head = signature + bytes.fromhex(
        "91bac23c9287e1a90000000000000000e19f13c0e9b1c37273000000000000000000000000000000"
    )
    assert structure_problem(2 * BLOCK, head) is None
    assert "empty" in structure_problem(0, b"")
    assert "truncated" in structure_problem(30, head[:30])
    assert "signature" in structure_problem(2 * BLOCK, b"\x00" * 64)
    assert "whole number" in structure_problem(2 * BLOCK + 1, head)
    assert "truncated" in structure_problem(BLOCK, head)


def test_file_changed_after_pickling_is_reported(tmp_path):
    path = tmp_path / "f.array_record"
    write_array_records(path, [b"a"] * 5)
    f = ArrayRecordFile(path)
    assert len(f) == 5
    copy = pickle.loads(pickle.dumps(f))
    write_array_records(path, [b"b"] * 6)
    with pytest.raises(CorruptDataError, match="changed"):
        copy.read(np.array([0]))


# --- indices, pickling, writer ---------------------------------------------------------------


def test_index_out_of_range(three_files):
    paths, _ = three_files
    source = ArrayRecordSource(paths)
    n = len(source)
    for bad in ([n], [-1], [0, n + 5]):
        with pytest.raises(RecordIndexError):
            source.__getitems__(bad)
    with pytest.raises(RecordIndexError, match=str(10)):
        source.files[0].read(np.array([10]))  # the first file has 10 records
    with pytest.raises(RecordIndexError):
        source.files[0].read(np.array([-1]))


def _read_in_worker(source: ArrayRecordSource, indices: list[int]) -> list[bytes]:
    return source.__getitems__(indices)


def test_pickled_source_reads_in_this_and_another_process(three_files):
    paths, expected = three_files
    flat = sum(expected, [])
    source = ArrayRecordSource(paths)
    source[0]  # a reader is open now; pickling must drop it
    copy = pickle.loads(pickle.dumps(source))
    assert all(f._reader is None for f in copy.files)
    indices = [32, 0, 17, 5]
    assert copy.__getitems__(indices) == [flat[i] for i in indices]
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        assert pool.submit(_read_in_worker, source, indices).result() == [flat[i] for i in indices]


def test_write_array_records_is_atomic(tmp_path):
    path = tmp_path / "out.array_record"
    assert write_array_records(path, iter([b"x", bytearray(b"yz"), b""])) == 3
    assert read_all(path) == [b"x", b"yz", b""]

    def failing():
        yield b"new"
        raise OSError("source went away")

    with pytest.raises(OSError, match="went away"):
        write_array_records(path, failing())
    assert read_all(path) == [b"x", b"yz", b""]  # the old file is untouched
    with pytest.raises(InvalidArgumentError, match="record 1 .* str"):
        write_array_records(path, [b"ok", "text"])
    with pytest.raises(InvalidArgumentError, match="no_such_option"):
        write_array_records(path, [b"ok"], options="no_such_option:3")
    # no temporary files left; the record map beside the file is the last good write's
    assert sorted(os.listdir(tmp_path)) == ["out.array_record", "out.array_record.ar.tpufeed-index"]
    assert write_array_records(tmp_path / "empty.array_record", []) == 0
    assert read_all(tmp_path / "empty.array_record") == []


# --- Grain interop ---------------------------------------------------------------------------


def test_grain_reads_the_same_records(tmp_path):
    rng = random.Random(11)
    expected = []
    paths = []
    for i in range(3):
        records = mixed_records(rng, 15)
        paths.append(str(tmp_path / f"g-{i}.array_record"))
        write_with_array_record(paths[-1], records, "group_size:1")
        expected += records
    ours = grain.MapDataset.source(ArrayRecordSource(paths))
    assert len(ours) == len(expected)
    assert list(ours) == expected
    shuffled = ours.shuffle(seed=5)
    assert sorted(shuffled) == sorted(expected)
    theirs = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths))
    assert list(theirs) == list(ours)
    assert list(theirs.shuffle(seed=5)) == list(shuffled)
