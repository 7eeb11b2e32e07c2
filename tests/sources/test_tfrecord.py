"""TFRecord reading and writing: TensorFlow interop, the cached index, corruption, pickling."""

from __future__ import annotations

import os
import pickle
import subprocess
import tempfile
import tracemalloc
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    RecordIndexError,
    SourceNotFoundError,
)
from tpufeed.sources.tfrecord import (
    TFRecordFile,
    TFRecordSource,
    default_index_dir,
    write_tfrecords,
)
from tpufeed.sources.tfrecord import framing as tfrecord_format
from tpufeed.sources.tfrecord import source as tfrecord
from tpufeed.sources.tfrecord.index import INDEX_SUFFIX, index_stamp, save_index
from tpufeed.storage.opener import FileIdentity


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


@pytest.fixture
def count_scans(monkeypatch):
    """Counts full-file scans; the list holds the path of each one."""
    calls: list[str] = []
    real = tfrecord.scan_records

    def counting(fd, path, size):
        calls.append(path)
        return real(fd, path, size)

    monkeypatch.setattr(tfrecord, "scan_records", counting)
    return calls


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory nobody can create files in (root included: chattr +i), with one data file."""
    d = tmp_path / "ro"
    d.mkdir()
    path = str(d / "data.tfrecord")
    write_tfrecords(path, [b"a", b"bb", b"ccc"])
    d.chmod(0o555)
    immutable = False
    if _writable(d):  # root ignores permission bits
        immutable = subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
    try:
        if _writable(d):
            pytest.skip("cannot make a directory unwritable here")
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(d)], check=True)
        d.chmod(0o755)


def _writable(d) -> bool:
    try:
        open(os.path.join(d, "probe"), "xb").close()
    except OSError:
        return False
    os.unlink(os.path.join(d, "probe"))
    return True


def _records(rng: np.random.Generator, n: int) -> list[bytes]:
    return [rng.bytes(int(k)) for k in rng.integers(0, 300, n)]


def _record_start(records: list[bytes], k: int) -> int:
    """Byte offset of record k's header, from the framing: 16 bytes around each record's data."""
    return sum(16 + len(r) for r in records[:k])


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_reads_tensorflow_files_byte_identical(tf, tmp_path):
    rng = np.random.default_rng(0)
    shards = [_records(rng, 40), [b"", rng.bytes(1 << 20), b"x", b""], _records(rng, 25)]
    for i, shard in enumerate(shards):
        with tf.io.TFRecordWriter(str(tmp_path / f"train-{i:05d}.tfrecord")) as w:
            for record in shard:
                w.write(record)
    expected = [r for shard in shards for r in shard]
    source = TFRecordSource(str(tmp_path / "train-*.tfrecord"))
    assert len(source) == len(expected)
    assert [len(f) for f in source.files] == [len(s) for s in shards]
    order = rng.permutation(len(expected))
    for batch in np.array_split(order, 7):
        assert source.__getitems__(batch) == [expected[i] for i in batch]
    assert source[41] == expected[41] and len(source[41]) == 1 << 20
    assert source.__getitems__([3, 3, 0]) == [expected[3], expected[3], expected[0]]
    source.close()


def test_written_files_read_by_tensorflow(tf, tmp_path):
    rng = np.random.default_rng(1)
    records = [b""] + _records(rng, 50) + [rng.bytes(1 << 20)]
    path = str(tmp_path / "ours.tfrecord")
    assert write_tfrecords(path, iter(records)) == len(records)
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == records
    # Same framing and masked CRCs, byte for byte, as TensorFlow's own writer.
    theirs = str(tmp_path / "theirs.tfrecord")
    with tf.io.TFRecordWriter(theirs) as w:
        for record in records:
            w.write(record)
    assert open(path, "rb").read() == open(theirs, "rb").read()
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_empty_file_has_no_records(tf, tmp_path):
    path = str(tmp_path / "empty.tfrecord")
    assert write_tfrecords(path, []) == 0
    assert os.path.getsize(path) == 0
    assert list(tf.data.TFRecordDataset(path)) == []
    f = TFRecordFile(path)
    assert len(f) == 0 and f.read(np.array([], np.int64)) == []
    assert len(TFRecordFile(path)) == 0  # from the cached index


def test_crcs_are_computed_by_the_c_extension():
    """Every TFRecord, manifest and cached shard is checked by CRC32C: google-crc32c's pure
    Python fallback (what 1.5.0 loads on Python 3.11; pyproject's floor is past it) makes that
    the whole cost of reading."""
    import google_crc32c

    assert google_crc32c.implementation == "c"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20), st.randoms(use_true_random=False))
def test_write_read_round_trip(records, random):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.tfrecord")
        write_tfrecords(path, records)
        f = TFRecordFile(path)
        order = list(range(len(records)))
        random.shuffle(order)
        assert f.read(np.array(order, np.int64)) == [records[i] for i in order]
        f.close()


def test_write_rejects_non_bytes_and_leaves_no_file(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    with pytest.raises(InvalidArgumentError, match="record 1 is str"):
        write_tfrecords(path, [b"ok", "text"])
    assert os.listdir(tmp_path) == []


def test_index_is_cached_and_reused(tmp_path, count_scans):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"a", b"bb", b"ccc"])
    first = TFRecordFile(path)
    assert first.index_path == path + INDEX_SUFFIX and os.path.isfile(first.index_path)
    assert count_scans == [path]
    mtime = os.stat(first.index_path).st_mtime_ns
    second = TFRecordFile(path)
    assert count_scans == [path]  # not scanned again
    assert os.stat(second.index_path).st_mtime_ns == mtime
    assert second.read([2, 0]) == [b"ccc", b"a"]


def test_index_rebuilt_after_append(tmp_path, count_scans):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"a", b"bb"])
    assert len(TFRecordFile(path)) == 2
    extra = str(tmp_path / "extra")
    write_tfrecords(extra, [b"appended"])
    with open(path, "ab") as f:
        f.write(open(extra, "rb").read())
    f = TFRecordFile(path)
    assert len(count_scans) == 2
    assert len(f) == 3 and f.read([2]) == [b"appended"]
    assert len(TFRecordFile(path)) == 3 and len(count_scans) == 2


def test_index_rebuilt_after_same_size_rewrite(tmp_path, count_scans):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"aaa", b"bbb"])
    before = os.stat(path)
    assert TFRecordFile(path).read([0, 1]) == [b"aaa", b"bbb"]
    write_tfrecords(path, [b"cc", b"dddd"])
    later = before.st_mtime_ns + 2_000_000_000
    os.utime(path, ns=(later, later))
    assert os.path.getsize(path) == before.st_size
    f = TFRecordFile(path)
    assert len(count_scans) == 2
    assert f.read([1, 0]) == [b"dddd", b"cc"]


def test_a_file_replaced_by_one_of_the_same_size_and_mtime_is_indexed_again(tmp_path, count_scans):
    """The index is the old file's: another inode, even of the same size and time, is not it."""
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"aaaa", b"bb"])
    before = os.stat(path)
    assert TFRecordFile(path).read([0, 1]) == [b"aaaa", b"bb"]
    write_tfrecords(path, [b"cc", b"dddd"])  # a new file renamed over it: another inode
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert now.st_ino != before.st_ino
    f = TFRecordFile(path)
    assert len(count_scans) == 2
    assert f.read([1, 0]) == [b"dddd", b"cc"]


def _crafted_index(index: str, path: str, offsets, lengths) -> None:
    """An index with a good CRC32C trailer whose table does not tile the file."""
    identity = FileIdentity.of(os.stat(path))
    save_index(
        index,
        index_stamp(path, identity),
        np.array(offsets, np.uint64),
        np.array(lengths, np.uint64),
    )


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "flipped", "pickled", "fifo", "wrong_lengths", "huge_length"],
)
def test_damaged_index_is_removed_with_a_warning_and_rebuilt(tmp_path, count_scans, damage):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"a", b"bb", b"ccc"])
    index = TFRecordFile(path).index_path
    data = open(index, "rb").read()
    os.remove(index)
    if damage == "garbage":
        open(index, "wb").write(b"not an index")
    elif damage == "truncated":
        open(index, "wb").write(data[:-9])
    elif damage == "flipped":
        open(index, "wb").write(data[:50] + bytes([data[50] ^ 1]) + data[51:])
    elif damage == "pickled":
        np.save(index + ".npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
        os.replace(index + ".npy", index)
    elif damage == "fifo":  # never opened for reading: that would block
        os.mkfifo(index)
    elif damage == "wrong_lengths":  # the last length no longer tiles the file
        _crafted_index(index, path, [12, 29, 47], [1, 2, 4])
    else:  # a length that would run far past the end of the file
        _crafted_index(index, path, [12, 29, 47], [1, 2, (1 << 64) - 9])
    crafted = damage in ("wrong_lengths", "huge_length")  # whole, but not this file's index
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = TFRecordFile(path)
    warned = [str(w.message) for w in caught if "removed; it is made again" in str(w.message)]
    assert len(warned) == (0 if crafted else 1)  # a whole index of other records: just replaced
    assert all(index in message and path in message for message in warned)
    assert len(count_scans) == 2
    assert f.read([0, 1, 2]) == [b"a", b"bb", b"ccc"]
    assert os.path.isfile(index) and not os.path.islink(index)
    assert len(TFRecordFile(path)) == 3 and len(count_scans) == 2  # the rebuilt one is good


def test_glob_skips_cached_indexes(tmp_path):
    for i in range(2):
        write_tfrecords(str(tmp_path / f"s{i}"), [b"a", b"b"])
    assert len(TFRecordSource(str(tmp_path / "*"))) == 4
    assert sorted(os.listdir(tmp_path)) == ["s0", "s0" + INDEX_SUFFIX, "s1", "s1" + INDEX_SUFFIX]
    assert len(TFRecordSource(str(tmp_path / "*"))) == 4


def test_index_dir_holds_the_index(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"a"])
    f = TFRecordFile(path, index_dir=tmp_path / "idx")
    assert os.path.dirname(f.index_path) == str(tmp_path / "idx")
    assert f.index_path.endswith("-d.tfrecord" + INDEX_SUFFIX)
    assert not os.path.exists(path + INDEX_SUFFIX)


def test_unwritable_dir_falls_back_to_index_dir(read_only_dir, tmp_path, count_scans):
    f = TFRecordFile(read_only_dir, index_dir=tmp_path / "idx")
    assert f.index_path.startswith(str(tmp_path / "idx"))
    assert TFRecordFile(read_only_dir, index_dir=tmp_path / "idx").read([1]) == [b"bb"]
    assert len(count_scans) == 1


def test_unwritable_dir_falls_back_to_cache_dir(read_only_dir, tmp_path, monkeypatch, count_scans):
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))
    assert default_index_dir() == str(tmp_path / "cache" / "tfrecord-index")
    f = TFRecordFile(read_only_dir)
    assert os.path.dirname(f.index_path) == default_index_dir()
    assert len(TFRecordFile(read_only_dir)) == 3 and len(count_scans) == 1


def test_default_index_dir_without_env(monkeypatch, tmp_path):
    monkeypatch.delenv("TPUFEED_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_index_dir() == str(tmp_path / ".cache" / "tpufeed" / "tfrecord-index")


def test_uncachable_index_warns_and_still_reads(read_only_dir, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    with pytest.warns(UserWarning, match="cannot cache its record index"):
        f = TFRecordFile(read_only_dir, index_dir=blocker)
    assert f.index_path is None and f.read([2]) == [b"ccc"]


# A byte inside each field of a record with 10 bytes of data: (offset in the record, error).
_FIELDS = {
    "length": (0, "length CRC"),
    "length_crc": (9, "length CRC"),
    "data": (17, "data CRC"),
    "data_crc": (24, "data CRC"),
}


@pytest.mark.parametrize("field", sorted(_FIELDS))
def test_a_flipped_byte_fails_when_its_record_is_read(tmp_path, field):
    records = [bytes([i]) * 10 for i in range(6)]
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, records)
    k = 3
    start = _record_start(records, k)
    where, error = _FIELDS[field]
    _flip(path, start + where)
    f = TFRecordFile(path)  # the damage is found when the record is read, not here
    with pytest.raises(CorruptDataError, match=f"record {k} at byte offset {start}: {error}") as e:
        f.read([k])
    assert e.value.record == k and e.value.path == path and path in str(e.value)
    assert f.read([0, 1, 2]) == records[:3]
    if error == "data CRC":  # framing intact: the records after it read
        assert len(f) == 6 and f.read([4, 5]) == records[4:]
    else:  # the framing breaks: the rest of the file is one position that fails
        assert len(f) == 4
        assert "cannot be split into records" in str(e.value)
    assert TFRecordFile(path).read([0]) == records[:1]  # the same from the cached index


@pytest.mark.parametrize("cut", [1, 11, 12, 20, 25])
def test_a_torn_last_record_fails_when_read(tmp_path, cut):
    records = [b"first", b"second", b"third-record"]
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, records)
    start = _record_start(records, 2)
    os.truncate(path, start + cut)  # 28 = 16 + len(records[2]) would be whole
    f = TFRecordFile(path)
    assert len(f) == 3 and f.read([1, 0]) == [records[1], records[0]]
    with pytest.raises(CorruptDataError, match=f"record 2 at byte offset {start}: torn") as e:
        f.read([0, 2])
    assert e.value.record == 2 and e.value.path == path


def test_file_altered_after_index_is_caught_on_read(tmp_path):
    records = [bytes([i]) * 100 for i in range(8)]
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, records)
    f = TFRecordFile(path)
    assert f.read([5]) == [records[5]]  # the handle is open now
    size = os.path.getsize(path)
    _flip(path, _record_start(records, 5) + 12 + 50)
    assert os.path.getsize(path) == size
    with pytest.raises(CorruptDataError, match="record 5 at byte offset") as e:
        f.read(np.array([0, 5, 1]))
    assert e.value.record == 5 and e.value.path == path
    assert f.read([4, 6]) == [records[4], records[6]]
    # Pickled before the change, read by a copy: the copy opens the file again and finds it
    # rewritten since it was first opened, so it reads none of it.
    copy = pickle.loads(pickle.dumps(f))
    with pytest.raises(CorruptDataError, match="changed since it was first opened"):
        copy.read([4])


def test_file_truncated_after_index_is_caught_on_read(tmp_path):
    records = [b"x" * 50] * 4
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, records)
    f = TFRecordFile(path)
    assert f.read([0]) == [records[0]]  # the handle is open now: it reads the cut file
    os.truncate(path, _record_start(records, 3) + 20)
    with pytest.raises(CorruptDataError, match="record 3 .* shorter"):
        f.read([3])
    # A file cut before its first read is refused whole when opened.
    again = TFRecordFile(path, pinned=TFRecordFile(path).pinned)
    os.truncate(path, _record_start(records, 2))
    with pytest.raises(CorruptDataError, match="truncated or rewritten"):
        again.read([0])


def test_index_out_of_range(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"a", b"b"])
    f = TFRecordFile(path)
    for bad in ([2], [-1], [0, 7]):
        with pytest.raises(RecordIndexError, match=f"{path}: record index {bad[-1]}"):
            f.read(np.array(bad))
    with pytest.raises(RecordIndexError):
        TFRecordSource(path)[2]


def test_missing_file(tmp_path):
    with pytest.raises(SourceNotFoundError, match="nope.tfrecord"):
        TFRecordSource(str(tmp_path / "nope.tfrecord"))


def test_pickled_copies_read_without_rescanning(tmp_path, count_scans):
    paths = [str(tmp_path / f"s{i}.tfrecord") for i in range(3)]
    for i, path in enumerate(paths):
        write_tfrecords(path, [f"{i}-{j}".encode() for j in range(5)])
    source = TFRecordSource(paths)
    assert source[7] == b"1-2"  # opens a handle, which must not travel
    copy = pickle.loads(pickle.dumps(source))
    assert all(f._file is None for f in copy.files)
    assert copy.__getitems__([14, 0, 7]) == [b"2-4", b"0-0", b"1-2"]
    f = pickle.loads(pickle.dumps(source.files[2]))
    assert f.read([1]) == [b"2-1"]
    assert len(count_scans) == 3
    copy.close()
    source.close()


def test_read_in_a_spawned_worker(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"zero", b"one", b"two"])
    f = TFRecordFile(path)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        assert pool.submit(f.read, np.array([2, 0])).result() == [b"two", b"zero"]


def test_scan_reads_records_larger_than_its_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(tfrecord_format, "_SCAN_CHUNK", 64)
    records = [b"s" * 10, b"L" * 500, b"", b"m" * 40, b"t" * 63]
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, records)
    f = TFRecordFile(path)
    assert f.read(np.arange(5)) == records
    assert f._offsets.dtype == np.uint64 and f._lengths.tolist() == [len(r) for r in records]


@pytest.mark.parametrize("length", [1 << 62, (1 << 64) - 1, 5000])
def test_the_stream_reader_holds_no_more_than_the_file_whatever_a_length_says(tmp_path, length):
    """A header whose length CRC is right (crafted, not a random flip) that declares far more
    bytes than the file has: the build's stream reader reads in pieces until the file ends."""
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"first"])
    header = length.to_bytes(8, "little")
    with open(path, "ab") as f:
        f.write(header + tfrecord_format._CRC.pack(tfrecord_format._masked_crc(header)))
        f.write(b"x" * 3000)
    tracemalloc.start()
    try:
        with open(path, "rb") as f, pytest.raises(CorruptDataError) as e:
            list(tfrecord_format.read_stream(f, path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(e.value).startswith(f"{path}: record 1 at byte offset 21: torn record: {length}")
    assert peak < 4 << 20
    f = TFRecordFile(path)  # the index scan: the same length is one unframeable position
    assert len(f) == 2 and f.read([0]) == [b"first"]
    with pytest.raises(CorruptDataError, match="record 1 at byte offset 21: torn record"):
        f.read([1])


def test_an_index_write_killed_midway_leaves_nothing_the_next_open_does_not_remove(tmp_path):
    """A writer killed in the middle of an index leaves a temporary named by its host, pid and
    start time: the next process that writes an index there removes it, and reads exactly."""
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, [b"a", b"bb", b"ccc"])
    host = os.uname().nodename
    killed = tmp_path / f"d.tfrecord{INDEX_SUFFIX}.tmp-{host}-{os.getpid()}-1-abcd"
    killed.write_bytes(b"half an index")  # this pid, another start time: a writer that is gone
    f = TFRecordFile(path)
    assert f.read([2, 0, 1]) == [b"ccc", b"a", b"bb"]
    assert sorted(os.listdir(tmp_path)) == ["d.tfrecord", "d.tfrecord" + INDEX_SUFFIX]
