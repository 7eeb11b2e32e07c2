"""The record map of an ArrayRecord file (`tpufeed.sources.array_record.record_map`): reads by
one pread where records were stored whole, never a wrong record where the map or file is not
what it was."""

from __future__ import annotations

import array
import os
import pickle
import random
import shutil
import warnings

import google_crc32c
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

import tpufeed
from tpufeed.errors import CorruptDataError
from tpufeed.sources.array_record import ArrayRecordFile, ArrayRecordSource, write_array_records
from tpufeed.sources.array_record.record_map import MAP_SUFFIX, load_map, map_records

BLOCK = 1 << 16


def varied(rng: random.Random, n: int) -> list[bytes]:
    """Random (stored whole) and compressible records, empty ones, and some over 64 KiB (which
    cross block headers)."""
    records = []
    for i in range(n):
        size = rng.choice([0, 1, 17, 1024, 1024, 1024, 5000, 70_000])
        records.append(rng.randbytes(size) if i % 3 else bytes(size))
    return records


def batches(n: int, seed: int = 0, count: int = 12, size: int = 64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, size) for _ in range(count)]


def test_records_read_through_the_map_are_the_records_written(tmp_path):
    rng = random.Random(0)
    files = [tmp_path / f"d-{i}.array_record" for i in range(3)]
    written = []
    for path in files:
        records = varied(rng, 600)
        write_array_records(path, records)
        written += records
    loaded = load_map(str(files[0]), 600, os.path.getsize(files[0]))
    assert loaded is not None and not isinstance(loaded, str)
    mapped = sum(1 for i in range(600) if loaded.lengths[i])
    assert 0 < mapped < 600  # the random ones; not the compressed ones, nor those over blocks
    source = ArrayRecordSource([str(p) for p in files])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for idx in batches(len(written)):
            assert source.__getitems__(idx) == [written[i] for i in idx]
    assert not source._by_ranges and all(f._mapped is not None for f in source.files)
    source.close()


def test_only_files_of_one_record_a_chunk_get_a_map(tmp_path):
    write_array_records(tmp_path / "g7.array_record", [os.urandom(100)] * 50, "group_size:7")
    write_array_records(tmp_path / "none.array_record", [os.urandom(100)] * 5, record_map=False)
    write_array_records(tmp_path / "zeros.array_record", [bytes(4000)] * 5)  # all compressed
    write_array_records(tmp_path / "one.array_record", [os.urandom(4000)] * 5)
    assert sorted(p.name for p in tmp_path.glob(f"*{MAP_SUFFIX}")) == [
        f"one.array_record{MAP_SUFFIX}"
    ]
    # globs of shards skip the maps
    ds = tpufeed.Dataset.from_array_record(str(tmp_path / "one.array_record*"))
    assert len(ds) == 5


def test_files_written_by_array_records_own_writer_read_as_before(tmp_path):
    path = tmp_path / "theirs.array_record"
    writer = ArrayRecordWriter(str(path), "group_size:1")
    records = [os.urandom(1024) for _ in range(300)]
    for record in records:
        writer.write(record)
    writer.close()
    source = ArrayRecordSource(str(path))
    assert source.__getitems__(np.arange(300)[::-1]) == records[::-1]
    assert source._by_ranges  # no map: array_record's own read(i, i + 1)


def _same_shape_records(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(1024) for _ in range(400)]


def test_a_map_beside_a_file_rewritten_in_its_place_is_dropped_never_read(tmp_path):
    """A file rewritten with other records of the same sizes (so the same size on disk), its old
    map copied back beside it: every read is the new file's, the map is removed with a
    warning."""
    path = tmp_path / "d.array_record"
    write_array_records(path, _same_shape_records(1))
    (tmp_path / "old-map").write_bytes((tmp_path / f"d.array_record{MAP_SUFFIX}").read_bytes())
    new = _same_shape_records(2)
    write_array_records(path, new, record_map=False)
    shutil.copy(tmp_path / "old-map", str(path) + MAP_SUFFIX)
    ds = tpufeed.Dataset.from_array_record(str(path))
    with pytest.warns(UserWarning, match="does not match record"):
        got = [r for r in ds]
    assert got == new
    assert not os.path.exists(str(path) + MAP_SUFFIX)


def test_a_map_of_another_file_is_dropped(tmp_path):
    a, b = tmp_path / "a.array_record", tmp_path / "b.array_record"
    write_array_records(a, [os.urandom(1024) for _ in range(100)])
    records = [os.urandom(1024) for _ in range(120)]
    write_array_records(b, records, record_map=False)
    shutil.copy(str(a) + MAP_SUFFIX, str(b) + MAP_SUFFIX)
    source = ArrayRecordSource(str(b))
    with pytest.warns(UserWarning, match="is not this file's"):
        assert source.__getitems__(np.arange(120)) == records
    assert not os.path.exists(str(b) + MAP_SUFFIX)


def test_a_damaged_record_under_a_good_map_is_a_named_error_and_the_map_stays(tmp_path):
    path = tmp_path / "d.array_record"
    records = [os.urandom(1024) for _ in range(200)]
    write_array_records(path, records)
    loaded = load_map(str(path), 200, os.path.getsize(path))
    assert loaded is not None and not isinstance(loaded, str)
    victim = next(i for i in range(50, 200) if loaded.lengths[i])
    at = loaded.offsets[victim] + loaded.starts[victim] + 100
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    source = ArrayRecordSource(str(path))
    with pytest.raises(CorruptDataError, match=f"record {victim}"):
        source.__getitems__(np.array([3, victim, 7]))
    assert os.path.exists(str(path) + MAP_SUFFIX)
    assert source.__getitems__(np.array([3, 7])) == [records[3], records[7]]


@pytest.mark.parametrize("damage", ["flip", "cut", "empty", "fifo", "link out"])
def test_a_bad_map_is_removed_with_a_warning_and_reads_go_on(tmp_path, damage):
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "d.array_record"
    records = [os.urandom(1024) for _ in range(150)]
    write_array_records(path, records)
    where = str(path) + MAP_SUFFIX
    data = open(where, "rb").read()
    os.unlink(where)
    if damage == "flip":
        open(where, "wb").write(data[:40] + bytes([data[40] ^ 1]) + data[41:])
    elif damage == "cut":
        open(where, "wb").write(data[: len(data) // 2])
    elif damage == "empty":
        open(where, "wb").close()
    elif damage == "fifo":
        os.mkfifo(where)
    else:
        outside = tmp_path / "elsewhere"
        outside.write_bytes(data)
        os.symlink(outside, where)
    source = ArrayRecordSource(str(path))
    with pytest.warns(UserWarning, match="record map of .*reads go on without it"):
        got = source.__getitems__(np.arange(150)[::-1])
    assert got == records[::-1]
    assert not os.path.lexists(where)


def test_pickled_sources_and_workers_read_through_their_own_maps(tmp_path):
    rng = random.Random(3)
    written = []
    paths = []
    for i in range(2):
        records = [rng.randbytes(rng.choice([10, 1024, 3000])) for _ in range(500)]
        path = tmp_path / f"d-{i}.array_record"
        write_array_records(path, records)
        paths.append(str(path))
        written += records
    source = ArrayRecordSource(paths)
    idx = np.random.default_rng(0).integers(0, 1000, 100)
    assert source.__getitems__(idx) == [written[i] for i in idx]
    copy = pickle.loads(pickle.dumps(source))
    assert copy.__getitems__(idx) == [written[i] for i in idx]
    plain = tpufeed.Dataset.from_array_record(paths).shuffle(seed=5)
    order = list(plain)
    assert sorted(order) == sorted(written)
    with_workers = list(tpufeed.Dataset.from_array_record(paths).shuffle(seed=5).workers(2))
    assert with_workers == order


def test_rewriting_a_file_replaces_its_map(tmp_path):
    path = tmp_path / "d.array_record"
    write_array_records(path, [os.urandom(1024) for _ in range(100)])
    records = [os.urandom(1024) for _ in range(100)]
    write_array_records(path, records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ArrayRecordSource(str(path)).__getitems__(np.arange(100)) == records
    f = ArrayRecordFile(str(path))
    assert f.direct_reader() is not None
    f.close()


def test_the_walk_over_a_damaged_file_never_raises_nor_maps_a_wrong_record(tmp_path):
    """Seeded byte flips across a file's chunk headers and framing: `map_records` gives no map,
    or one whose every span holds its record's very bytes."""
    path = tmp_path / "d.array_record"
    records = varied(random.Random(7), 120)
    write_array_records(path, records, record_map=False)
    data = path.read_bytes()
    crcs = array.array("I", [google_crc32c.value(r) for r in records])
    rng = random.Random(11)
    for case in range(300):
        damaged = bytearray(data)
        for _ in range(rng.choice([1, 2, 8])):
            at = rng.randrange(len(data) // 2) if case % 2 else rng.randrange(64, 200)
            damaged[at] ^= 1 << rng.randrange(8)
        (tmp_path / "x").write_bytes(bytes(damaged))
        fd = os.open(tmp_path / "x", os.O_RDONLY)
        try:
            found = map_records(fd, len(damaged), crcs)
        finally:
            os.close(fd)
        if found is None:
            continue
        for i, record in enumerate(records):
            n = found.lengths[i]
            if n:
                span = bytes(damaged[found.offsets[i] : found.offsets[i] + n])
                assert span[found.starts[i] :] == record, (case, i)
                assert google_crc32c.value(span) == found.crcs[i]


def test_files_with_and_without_a_map_read_together(tmp_path):
    mapped, plain = tmp_path / "a.array_record", tmp_path / "b.array_record"
    first = [os.urandom(700) for _ in range(250)]
    second = [os.urandom(700) for _ in range(250)]
    write_array_records(mapped, first)
    write_array_records(plain, second, record_map=False)
    source = ArrayRecordSource([str(mapped), str(plain)])
    everything = first + second
    for idx in batches(500, seed=4):
        assert source.__getitems__(idx) == [everything[i] for i in idx]
    assert not source._by_ranges
    assert source.files[0]._mapped is not None and source.files[1]._mapped is None


def test_a_map_that_cannot_be_made_never_fails_the_write(tmp_path, monkeypatch, caplog):
    from tpufeed.sources.array_record import writer

    def broken(*args):
        raise MemoryError("no room to walk")

    monkeypatch.setattr(writer, "map_records", broken)
    path = tmp_path / "d.array_record"
    records = [os.urandom(300) for _ in range(20)]
    with caplog.at_level("WARNING", logger="tpufeed"):
        assert write_array_records(path, records) == 20
    assert "no record map made (no room to walk)" in caplog.text
    assert not os.path.exists(str(path) + MAP_SUFFIX)
    assert ArrayRecordSource(str(path)).__getitems__(np.arange(20)) == records


def test_a_map_that_cannot_be_read_leaves_the_reads_to_array_record(tmp_path, monkeypatch):
    from tpufeed.sources.array_record import direct

    def failing(*args):
        raise OSError(5, "Input/output error")

    path = tmp_path / "d.array_record"
    records = [os.urandom(500) for _ in range(30)]
    write_array_records(path, records)
    monkeypatch.setattr(direct, "load_map", failing)
    source = ArrayRecordSource(str(path))
    with pytest.warns(UserWarning, match="cannot be read .*Input/output error.*without it"):
        assert source.__getitems__(np.arange(30)[::-1]) == records[::-1]
    assert os.path.exists(str(path) + MAP_SUFFIX)  # kept: the next process may read it


def test_a_map_cut_in_place_while_in_use_changes_nothing(tmp_path):
    """An in-place copy (or rsync --inplace) truncates the map a reader has loaded: the reader
    reads on, each span still checked against the data file."""
    path = tmp_path / "d.array_record"
    records = [os.urandom(800) for _ in range(100)]
    write_array_records(path, records)
    source = ArrayRecordSource(str(path))
    assert source.__getitems__(np.arange(50)) == records[:50]
    with open(str(path) + MAP_SUFFIX, "r+b") as f:
        f.truncate(10)
    assert source.__getitems__(np.arange(100)[::-1]) == records[::-1]
