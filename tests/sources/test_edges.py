"""Sources at their edges: forked processes, files changed while read, files that are not files."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import traceback

import pytest

import tpufeed
from tpufeed.errors import CorruptDataError, SourceError
from tpufeed.sources.array_record import ArrayRecordFile, ArrayRecordSource, write_array_records
from tpufeed.sources.tfrecord import TFRecordFile, TFRecordSource, write_tfrecords


def in_forked_child(fn, timeout: float = 60.0):
    """fn() run in a process forked from this one: its result, or its error raised here."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the test
            send.send(("error", (e, traceback.format_exc())))

    proc = ctx.Process(target=child)
    proc.start()
    try:
        if not receive.poll(timeout):
            raise AssertionError(f"the forked child gave no answer in {timeout} s (blocked?)")
        status, value = receive.recv()
    finally:
        proc.kill()
        proc.join()
    if status == "error":
        raise value[0]
    return value


def _array_record_files(tmp_path, records, shards=2, options="group_size:1"):
    from array_record.python.array_record_module import ArrayRecordWriter

    paths = []
    for s in range(shards):
        path = str(tmp_path / f"part-{s}.array_record")
        writer = ArrayRecordWriter(path, options)
        for r in records[s::shards]:
            writer.write(r)
        writer.close()
        paths.append(path)
    return paths


# --- readers never cross a fork ---------------------------------------------------------------


def test_a_forked_child_reads_array_record_through_its_own_helper_exactly(tmp_path):
    records = [b"%d" % i for i in range(50)]
    _array_record_files(tmp_path, records)
    source = ArrayRecordSource(str(tmp_path / "part-*.array_record"))
    expected = source.__getitems__(list(range(len(source))))  # the parent's readers are open

    def child():
        from tpufeed.sources.array_record._reader_process import ReaderProcess

        got = source.__getitems__([7, 3, 44, 3])
        fresh = ArrayRecordSource(str(tmp_path / "part-*.array_record"))  # counted in the helper
        return got, len(fresh), fresh.__getitems__([0, 49]), ReaderProcess._shared is not None

    got, count, ends, helped = in_forked_child(child)
    assert got == [expected[i] for i in (7, 3, 44, 3)]
    assert count == 50 and ends == [expected[0], expected[49]]
    assert helped  # array_record's state inherited from this process was never touched
    assert source.__getitems__([1]) == [expected[1]]  # and the parent's readers still work


def _how_read(record):
    """Where a worker read `record`: (its pid, whether through a helper process)."""
    from tpufeed.sources.array_record._reader_process import ReaderProcess, native_state_inherited

    return {
        "pid": os.getpid(),
        "helped": native_state_inherited() or ReaderProcess.running() is not None,
        "record": record,
    }


def test_workers_forked_by_the_fork_server_read_array_record_themselves(tmp_path):
    # The parent has its readers open (counted and read); the workers come from the fork
    # server, which loaded array_record but never used it: they read directly, no helper.
    records = [b"%d" % i for i in range(40)]
    paths = _array_record_files(tmp_path, records)
    ds = tpufeed.Dataset.from_array_record(paths)
    assert list(ds) == [records[i] for i in range(0, 40, 2)] + [records[i] for i in range(1, 40, 2)]
    got = list(ds.map(_how_read).workers(2, isolate=True))
    assert [g["record"] for g in got] == list(ds)
    assert {g["pid"] for g in got}.isdisjoint({os.getpid()})
    assert not any(g["helped"] for g in got)


def _damaged_first_record(tmp_path):
    """An ArrayRecord file of 20 records of 1,000 bytes whose first record is damaged."""
    rng = random.Random(0)
    records = [rng.randbytes(1000) for _ in range(20)]
    (path,) = _array_record_files(tmp_path, records, shards=1)
    data = bytearray(open(path, "rb").read())
    data[64 + 40 + 20] ^= 0xFF  # inside the first record's chunk
    open(path, "wb").write(bytes(data))
    return path


def test_a_damaged_record_read_in_a_forked_child_names_the_file_and_record(tmp_path):
    path = _damaged_first_record(tmp_path)
    source = ArrayRecordSource(path)
    assert len(source) == 20

    def child():
        try:
            source.__getitems__([2, 0])
        except CorruptDataError as e:
            return type(e).__name__, e.path, e.record, str(e)
        return None

    name, where, record, message = in_forked_child(child)
    assert (name, where, record) == ("CorruptDataError", path, 0)
    assert f"{path} record 0 " in message


def test_a_damaged_record_read_by_a_worker_names_the_file_and_record(tmp_path):
    path = _damaged_first_record(tmp_path)
    ds = tpufeed.Dataset.from_array_record(path).map(len).workers(1, isolate=True)
    with pytest.raises(CorruptDataError) as caught:
        list(ds)
    assert (caught.value.path, caught.value.record) == (path, 0)
    assert f"{path} record 0 " in str(caught.value) and "in tpufeed worker 0" in str(caught.value)
    assert (
        list(
            tpufeed.Dataset.from_array_record(path)
            .map(len)
            .ignore_errors(1)
            .workers(1, isolate=True)
        )
        == [1000] * 19
    )


@pytest.mark.parametrize("file_format", ["array_record", "tfrecord"])
def test_a_read_in_progress_in_another_thread_at_fork_time_does_not_block_the_child(
    tmp_path, file_format
):
    records = [b"r%d" % i for i in range(10)]
    if file_format == "array_record":
        write_array_records(tmp_path / "a.array_record", records)
        source = ArrayRecordSource(str(tmp_path / "a.array_record"))
    else:
        write_tfrecords(tmp_path / "a.tfrecord", records)
        source = TFRecordSource(str(tmp_path / "a.tfrecord"))
    assert source.__getitems__([0]) == [records[0]]
    # The file's lock as a parent thread holds it in the middle of a read: a child that
    # inherited it locked would wait forever for a thread it does not have.
    held = source.files[0]._lock
    holder = threading.Thread(target=held.acquire)
    holder.start()
    holder.join()
    try:
        assert in_forked_child(lambda: source.__getitems__([9, 4]), timeout=30) == [
            records[9],
            records[4],
        ]
    finally:
        held.release()


# --- files changed while they are read ----------------------------------------------------------


@pytest.mark.parametrize("options", ["group_size:1", "group_size:10"])
def test_an_array_record_file_truncated_while_read_raises_naming_file_and_record(tmp_path, options):
    rng = random.Random(0)
    records = [b"%04d" % i + rng.randbytes(500) for i in range(300)]  # 150 KB, uncompressible
    (path,) = _array_record_files(tmp_path, records, shards=1, options=options)
    it = iter(tpufeed.Dataset.from_array_record(path).batch(10))
    first = next(it)
    assert list(first) == records[:10]
    os.truncate(path, os.path.getsize(path) // 2)  # in place: same inode, half the bytes
    with pytest.raises(CorruptDataError) as caught:
        for _ in it:
            pass
    error = caught.value
    assert error.path == path and error.record is not None and error.record >= 10
    assert f"{path} record {error.record}: the file changed while it was being read" in str(error)
    assert "truncated or rewritten in place" in str(error)


def test_empty_records_of_an_unchanged_array_record_file_read_back_empty(tmp_path):
    records = [b"", b"x", b"", b"yz"] * 5
    (path,) = _array_record_files(tmp_path, records, shards=1)
    source = ArrayRecordSource(path)
    assert source.__getitems__(list(range(20))) == records
    assert source.__getitems__([2, 0, 3]) == [b"", b"", b"yz"]


def test_a_tfrecord_file_truncated_while_read_raises_naming_file_and_record(tmp_path):
    records = [b"%04d" % i + bytes(500) for i in range(300)]
    path = str(tmp_path / "a.tfrecord")
    write_tfrecords(path, records)
    it = iter(tpufeed.Dataset.from_tfrecord(path).batch(10))
    assert list(next(it)) == records[:10]
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(CorruptDataError) as caught:
        for _ in it:
            pass
    error = caught.value
    assert error.path == path and error.record is not None and error.record >= 10
    assert f"{path}: record {error.record} at byte offset" in str(error)


# --- damaged TFRecord records are found when read, so ignore_errors can skip them ---------------


def _tfrecord_with_damage(tmp_path, damage: str):
    records = [b"%03d" % i + bytes(20) for i in range(30)]
    path = str(tmp_path / "d.tfrecord")
    write_tfrecords(path, records)
    start = 12 * 39  # record 12's header: 16 + 23 bytes per record
    with open(path, "r+b") as f:
        f.seek(start + (3 if damage == "length" else 16 + 5))  # in the length, or in the data
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    return path, records


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("damage", ["data", "length"])
def test_ignore_errors_skips_a_damaged_tfrecord_record(tmp_path, damage, workers):
    path, records = _tfrecord_with_damage(tmp_path, damage)
    ds = tpufeed.Dataset.from_tfrecord(path)  # opening does not fail on the damage
    got = list(ds.ignore_errors(1).workers(workers))
    # A bad data CRC loses that record; a bad length, everything from it on (one bad record).
    assert got == (records[:12] + records[13:] if damage == "data" else records[:12])
    with pytest.raises(CorruptDataError) as caught:
        list(ds)
    assert caught.value.path == path and caught.value.record == 12
    assert f"{path}: record 12 at byte offset {12 * 39}: " in str(caught.value)


@pytest.mark.emulator
@pytest.mark.parametrize("cache_bytes", [None, 0])  # through the shard cache, or ranged reads
@pytest.mark.parametrize("damage", ["data", "length"])
def test_ignore_errors_skips_a_damaged_tfrecord_record_on_gcs(
    gcs, bucket, upload, tmp_path, damage, cache_bytes
):
    path, records = _tfrecord_with_damage(tmp_path, damage)
    url = upload(bucket, "d.tfrecord", path)
    ds = tpufeed.Dataset.from_tfrecord(url, cache_dir=tmp_path / "c", cache_bytes=cache_bytes)
    got = list(ds.ignore_errors(1))
    assert got == (records[:12] + records[13:] if damage == "data" else records[:12])
    with pytest.raises(CorruptDataError, match=f"{url}: record 12 at byte offset {12 * 39}: "):
        list(ds)


# --- only regular files are read ------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    """A named pipe nobody writes to: opening it for reading the ordinary way blocks forever."""
    path = str(tmp_path / "pipe.array_record")
    os.mkfifo(path)
    return path


@pytest.mark.timeout(60)  # before the fix each of these blocked forever
@pytest.mark.parametrize(
    "open_it",
    [
        lambda p: tpufeed.Dataset.from_array_record(p),
        lambda p: tpufeed.Dataset.from_tfrecord(p),
        lambda p: tpufeed.Dataset.from_array_record(os.path.join(os.path.dirname(p), "*")),
        lambda p: len(ArrayRecordFile(p)),
        lambda p: TFRecordFile(p),
        lambda p: TFRecordSource(os.path.join(os.path.dirname(p), "*.array_record")),
    ],
    ids=[
        "from_array_record",
        "from_tfrecord",
        "glob",
        "ArrayRecordFile",
        "TFRecordFile",
        "TFRecordSource",
    ],
)
def test_a_fifo_is_refused_by_name_without_blocking(fifo, open_it):
    with pytest.raises(SourceError, match="is a FIFO \\(named pipe\\), not a regular file") as e:
        open_it(fifo)
    assert e.value.path == fifo and fifo in str(e.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["shard", "manifest"])
def test_a_dataset_folder_with_a_fifo_is_refused_by_name(tmp_path, what):
    from tests.dataset_folder import make_dataset

    root = tmp_path / "ds"
    manifest = make_dataset(root, [[b"a", b"b"], [b"c"]])
    path = root / (manifest["shards"][1]["path"] if what == "shard" else "manifest.json")
    os.remove(path)
    os.mkfifo(path)
    with pytest.raises(SourceError, match="is a FIFO") as e:
        tpufeed.Dataset.open(root)  # a shard too is refused when the dataset opens
    assert e.value.path == str(path)


@pytest.mark.parametrize(
    "open_it",
    [
        tpufeed.Dataset.from_array_record,
        tpufeed.Dataset.from_tfrecord,
        ArrayRecordFile,
        TFRecordFile,
    ],
)
def test_a_device_is_refused_by_name(open_it):
    with pytest.raises(SourceError, match="/dev/zero is a character device, not a regular file"):
        len(open_it("/dev/zero"))


def test_closing_in_a_forked_child_starts_no_helper(tmp_path):
    write_array_records(tmp_path / "a.array_record", [b"x"])
    source = ArrayRecordSource(str(tmp_path / "a.array_record"))
    assert source[0] == b"x"

    def child():
        from tpufeed.sources.array_record._reader_process import ReaderProcess

        assert source[0] == b"x" and ReaderProcess.running() is not None  # its own helper

        def grandchild():
            source.close()  # the parent's helper is not this process's: nothing to tell
            return ReaderProcess.running()

        return in_forked_child(grandchild)

    assert in_forked_child(child) is None
