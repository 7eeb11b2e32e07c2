"""The shard cache: settings, counting from footers, locks, eviction rules (the `cache` command:
tests/cli/test_cache.py)."""

from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import pytest

from tests.gcs_emulator import upload_shards
from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceError
from tpufeed.sources.array_record import ArrayRecordSource, write_array_records
from tpufeed.storage.cache import verified as cache_module
from tpufeed.storage.cache.eviction import PlanBoard
from tpufeed.storage.cache.readahead import ReadAhead
from tpufeed.storage.cache.shard_cache import ShardCache, default_cache_dir, entry_key
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.stores.gcs import GcsObject, list_objects

# -- without the emulator --------------------------------------------------------------------


def test_the_cache_dir_is_the_argument_else_the_variable_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TPUFEED_CACHE_DIR", raising=False)
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "tpufeed")
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "env"))
    assert ShardCache().root == str(tmp_path / "env")
    assert ShardCache(tmp_path / "arg", 10).root == str(tmp_path / "arg")
    assert not (tmp_path / "env").exists()  # opening a cache creates nothing yet


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_bytes": -1}, "cache_bytes"),
        ({"max_bytes": 1.5}, "cache_bytes"),
        ({"downloads": 0}, "downloads"),
        ({"part_bytes": 100}, "part_bytes"),
    ],
)
def test_bad_settings_are_refused(tmp_path, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        ShardCache(tmp_path, **kwargs)


def _files(n: int, cache: ShardCache, size: int = 100) -> list[RemoteFile]:
    return [RemoteFile(GcsObject("b", f"s{i}", size, 1, None), cache) for i in range(n)]


def test_the_read_ahead_evicts_the_furthest_next_use_and_never_a_sooner_one(tmp_path):
    files = _files(5, ShardCache(tmp_path, 1000))
    ra = ReadAhead(files)
    ra._start_threads = lambda: None  # decisions only: no downloads
    # Plan: files 0 and 1 (positions 0-9), then 2 (10-14), then 3 (15-19); 4 never.
    ra.announce(np.array([0, 1] * 5 + [2] * 5 + [3] * 5))
    keys = [entry_key(f.obj) for f in files]
    entries = [(k, 100, float(i)) for i, k in enumerate(keys)]
    with ra._cond:
        assert [ra.next_use(f) for f in range(5)] == [0, 1, 10, 15, math.inf]
    assert ra._victims_for(10)(entries, 100) == [keys[4], keys[3]]  # 0, 1 are needed sooner
    assert ra._victims_for(0)(entries, 100) == [keys[4], keys[3], keys[2], keys[1]]
    ra._now = 12  # readers moved on: 0 and 1 are done
    with ra._cond:
        assert [ra.next_use(f) for f in range(5)] == [math.inf, math.inf, 12, 15, math.inf]
    # Ties (no further use) go least recently read first.
    assert ra._victims_for(15)(entries, 100) == [keys[0], keys[1], keys[4]]


def test_readers_follow_posted_plans_and_ignore_dead_ones(tmp_path):
    cache = ShardCache(tmp_path, 1000)
    board = PlanBoard(cache.layout)
    board.post("live", {"a": 5.0, "b": 50.0, "c": 0.0})
    entries = [("a", 1, 1.0), ("b", 1, 2.0), ("c", 1, 3.0), ("d", 1, 4.0)]
    assert board.chooser()(entries, 1) == ["d", "b", "a", "c"]  # unplanned, then furthest
    read_after_posting = [("a", 1, 1.0), ("b", 1, time.time() + 1), ("d", 1, 4.0)]
    assert board.chooser()(read_after_posting, 1) == ["d", "a", "b"]  # b is in use now
    from tpufeed.storage.cache.layout import write_json

    write_json(
        os.path.join(cache.layout.plans, "dead.json"),
        {"pid": 2**22 + 12345, "posted": time.time(), "next": {"d": 0.0}},
    )
    assert board.chooser()(entries, 1)[0] == "d"
    assert not os.path.exists(os.path.join(cache.layout.plans, "dead.json"))
    board.withdraw("live")
    assert board.distances() == []


# -- against the emulator -------------------------------------------------------------------

emulated = pytest.mark.emulator


@emulated
@pytest.mark.parametrize("records,size", [(150, 600), (20000, 8)])
def test_counts_come_from_footers_and_are_remembered(gcs, bucket, upload, tmp_path, records, size):
    path = str(tmp_path / "x.array_record")
    write_array_records(path, (i.to_bytes(4, "little") * (size // 4) for i in range(records)))
    url = upload(bucket, "x.array_record", path)
    total = os.path.getsize(path)
    source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    assert len(source) == records
    assert gcs.counters.only(bucket).media_bytes < min(total, 2 * 65536 + 64 + 1024 + 40 * records)
    assert source.files[0].remote.cache.contains(source.files[0].remote.obj) is False
    gcs.reset()
    assert len(ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))) == records
    assert gcs.counters.only(bucket).media_bytes == 0
    last = source.__getitems__(np.array([records - 1]))[0]
    assert last[:4] == (records - 1).to_bytes(4, "little")


@emulated
def test_a_damaged_object_is_named_at_count_time(gcs, bucket, upload, tmp_path):
    url = upload(bucket, "bad.array_record", os.urandom(3 * 65536))
    with pytest.raises(CorruptDataError, match=f"{url}: does not start with the Riegeli"):
        ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    short = upload(bucket, "short.array_record", b"")
    with pytest.raises(CorruptDataError, match=f"{short}: file is empty"):
        ArrayRecordSource(short, cache=ShardCache(tmp_path / "c"))


@emulated
def test_objects_larger_than_the_cache_and_array_records_without_one_are_refused(
    gcs, bucket, upload, tmp_path
):
    url, _ = upload_shards(upload, bucket, "big", 1, 150)
    obj = list_objects(url)[0]
    source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c", 1000))  # counting still works
    with pytest.raises(SourceError, match=rf"{obj.url}: {obj.size:,} bytes do not fit .* 1,000"):
        source.__getitems__([0])
    with pytest.raises(InvalidArgumentError, match="need a shard cache; cache_bytes=0"):
        ArrayRecordSource(url, cache=ShardCache(tmp_path / "c", 0))


@emulated
def test_a_pinned_shard_is_not_evicted_until_released(gcs, bucket, upload, tmp_path):
    url, _ = upload_shards(upload, bucket, "pin", 2, 150)
    a, b = list_objects(url)
    room = ShardCache(tmp_path / "c", 0).footprint(a.size)  # room for one shard
    cache = ShardCache(tmp_path / "c", room)
    done = threading.Event()

    def read_b():
        with ShardCache(tmp_path / "c", room).pinned(b):  # another handle: another reader
            done.set()

    with cache.pinned(a) as path_a:
        thread = threading.Thread(target=read_b)
        thread.start()
        assert not done.wait(0.5)  # b waits for room: a is being read
        assert os.path.exists(path_a)
    assert done.wait(10)
    thread.join()
    assert not os.path.exists(path_a) and cache.usage() == room


@emulated
def test_downloads_left_by_a_dead_process_are_removed(gcs, bucket, upload, tmp_path):
    url, _ = upload_shards(upload, bucket, "dead", 2, 150)
    a, b = list_objects(url)
    room = ShardCache(tmp_path / "c", 0).footprint
    cache = ShardCache(tmp_path / "c", room(a.size) + room(b.size) - 1)
    cache.layout.make_dirs()
    stale = os.path.join(cache.shards_dir, f"{entry_key(a)}.part-999999-0000")
    with open(stale, "wb") as f:
        f.truncate(a.size)
    assert cache.usage() == room(a.size)
    with cache.pinned(b):  # needs room: the scan finds the part nobody holds, and drops it
        pass
    assert not os.path.exists(stale) and cache.usage() == room(b.size)


@emulated
def test_after_a_reboot_files_are_checked_again_not_fetched(
    gcs, bucket, upload, tmp_path, monkeypatch
):
    url, records = upload_shards(upload, bucket, "boot", 2, 150)
    source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    assert source.__getitems__(np.arange(len(source))) == records
    crcs = []
    real = cache_module.files.file_crc32c
    monkeypatch.setattr(
        cache_module.files, "file_crc32c", lambda p, **kw: crcs.append(p) or real(p, **kw)
    )
    monkeypatch.setattr(cache_module, "BOOT", "another-boot")
    gcs.reset()
    again = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    assert again.__getitems__(np.arange(len(again))) == records
    assert gcs.counters.only(bucket).media_bytes == 0 and len(crcs) == 2


# -- cached copies are opened through the opener -----------------------------------------------


def _source(kind: str, url: str, cache_dir):
    import tpufeed

    open_it = {
        "array_record": tpufeed.Dataset.from_array_record,
        "tfrecord": tpufeed.Dataset.from_tfrecord,
        "parquet": tpufeed.Dataset.from_parquet,
    }[kind]
    return open_it(url, cache_dir=cache_dir).source


def _upload_kind(upload, bucket: str, kind: str, tmp_path) -> tuple[str, list]:
    if kind != "parquet":
        return upload_shards(upload, bucket, kind, 2, 40, file_format=kind)
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    for s in range(2):
        path = tmp_path / f"p{s}.parquet"
        pq.write_table(pa.table({"i": np.arange(40 * s, 40 * s + 40)}), path, row_group_size=16)
        upload(bucket, f"parquet/part-{s}.parquet", str(path))
    return f"gs://{bucket}/parquet/part-*.parquet", [{"i": i} for i in range(80)]


def _all(source) -> list:
    return source.__getitems__(np.arange(len(source)))


@emulated
@pytest.mark.timeout(120)  # a FIFO opened the ordinary way would block forever
@pytest.mark.parametrize("kind", ["array_record", "tfrecord", "parquet"])
def test_a_fifo_in_place_of_a_cached_copy_never_blocks_and_the_shard_is_fetched_again(
    gcs, bucket, upload, tmp_path, kind
):
    url, records = _upload_kind(upload, bucket, kind, tmp_path)
    source = _source(kind, url, tmp_path / "c")
    assert _all(source) == records
    copies = [f.remote.local_path() for f in source.files]
    for copy in copies:
        os.remove(copy)
        os.mkfifo(copy)
    record = copies[0].removesuffix(".data") + ".json"  # where its check is recorded
    os.remove(record)
    os.mkfifo(record)
    assert _all(_source(kind, url, tmp_path / "c")) == records  # a restarted job
    assert all(os.path.isfile(copy) for copy in copies)  # each FIFO found, removed, fetched
    time.sleep(0.05)  # past the 20 ms in which an open copy is not looked at again
    assert _all(source) == records  # the first source's readers reopen the new copies


@emulated
@pytest.mark.timeout(60)
def test_a_copy_swapped_after_its_check_is_refused_when_opened(gcs, bucket, upload, tmp_path):
    url, _ = upload_shards(upload, bucket, "swap", 1, 40)
    (obj,) = list_objects(url)
    cache = ShardCache(tmp_path / "c")
    with cache.pinned(obj) as path:
        os.close(cache.open_copy(obj))  # the very file verified: opened
        twin = path + ".twin"
        with open(path, "rb") as src, open(twin, "wb") as dst:
            dst.write(src.read())  # the same bytes, another file
        os.replace(twin, path)
        with pytest.raises(CorruptDataError, match="changed after it was verified") as e:
            cache.open_copy(obj)
        assert e.value.path == obj.url and path in str(e.value)
        os.remove(path)
        os.mkfifo(path)
        with pytest.raises(SourceError, match="is a FIFO"):
            cache.open_copy(obj)  # refused without blocking


@emulated
def test_a_footer_probe_left_by_a_dead_process_is_removed_by_the_next_count(
    gcs, bucket, upload, tmp_path
):
    import subprocess
    import sys

    url, _ = upload_shards(upload, bucket, "probe", 1, 40)
    cache_dir = tmp_path / "c"
    scratch = ShardCache(cache_dir).scratch_dir()
    writer = (
        "import os, sys; from tpufeed.storage.derived import temporary_name; "
        "open(temporary_name(os.path.join(sys.argv[1], 'count.array_record')), 'wb').close()"
    )
    subprocess.run([sys.executable, "-c", writer, scratch], check=True)  # it ends: a dead writer
    (left,) = os.listdir(scratch)
    assert left.startswith("count.array_record.tmp-")
    assert len(ArrayRecordSource(url, cache=ShardCache(cache_dir))) == 40  # counted by ranges
    assert os.listdir(scratch) == []


@emulated
def test_a_damaged_record_count_kept_in_the_cache_is_counted_again(gcs, bucket, upload, tmp_path):
    """The count kept beside the cache is a derived file: a damaged one would make the shard
    read as 50 records; it fails its CRC32C, is removed with a warning and counted again."""
    url, records = upload_shards(upload, bucket, "facts", 1, 40)
    assert len(ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))) == 40
    (obj,) = list_objects(url)
    facts = ShardCache(tmp_path / "c").layout.meta(entry_key(obj))
    data = open(facts, "rb").read()
    assert b'"num_records": 40' in data
    with open(facts + ".new", "wb") as f:
        f.write(data.replace(b'"num_records": 40', b'"num_records": 50'))
    os.replace(facts + ".new", facts)
    with pytest.warns(UserWarning, match=r"the facts kept about .* fails its CRC32C check"):
        source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    assert len(source) == 40 and source.__getitems__(np.arange(40)) == records
