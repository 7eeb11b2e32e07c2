"""Datasets over gs:// shards, end to end through the emulator and the fault proxy (issue 4)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tpufeed
from tests.gcs_emulator import upload_shards
from tpufeed.sources.array_record import ArrayRecordSource
from tpufeed.sources.tfrecord import TFRecordSource
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.stores.gcs import list_objects

pytestmark = pytest.mark.emulator

SHARDS, RECORDS = 6, 150  # ~100 KiB of records per shard: a 192 KiB ArrayRecord file


def _dataset(
    url: str, cache_dir, cache_bytes: int | None = None, file_format: str = "array_record"
) -> tpufeed.Dataset:
    """Through the public constructors and their cache keywords."""
    if file_format == "array_record":
        return tpufeed.Dataset.from_array_record(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
    return tpufeed.Dataset.from_tfrecord(url, cache_dir=cache_dir, cache_bytes=cache_bytes)


def _sizes(url: str) -> dict[str, int]:
    return {o.name: o.size for o in list_objects(url)}


@pytest.mark.parametrize(
    "file_format,workers,cache_bytes",
    [("array_record", 0, None), ("array_record", 2, None), ("tfrecord", 0, 0)],
)
def test_an_epoch_is_exactly_once_with_a_fifth_of_requests_failing(
    gcs, bucket, upload, tmp_path, caplog, file_format, workers, cache_bytes
):
    url, records = upload_shards(upload, bucket, "ds", SHARDS, RECORDS, file_format)
    gcs.set_faults(error_503=0.10, reset=0.05, cut=0.05, slow=0.05, delay_s=0.02, seed=4)
    ds = _dataset(url, tmp_path / "c", cache_bytes, file_format)
    with caplog.at_level(logging.WARNING, logger="tpufeed"):
        got = list(ds.shuffle(seed=1).workers(workers))
    assert sorted(got) == sorted(records)
    assert gcs.counters.faults >= 0.1 * gcs.counters.only(bucket).requests > 0
    assert not caplog.records  # every failure was retried away, quietly


def test_a_cache_smaller_than_the_dataset_streams_an_epoch_within_its_limit(
    gcs, bucket, upload, tmp_path
):
    shards = 8
    url, records = upload_shards(upload, bucket, "big", shards, RECORDS)
    shard_bytes = max(_sizes(url).values())
    limit = 3 * shard_bytes  # the dataset is 8 shards; a window of 2 needs 2 or 3 at a time
    cache = ShardCache(tmp_path / "c", limit)
    ds = _dataset(url, tmp_path / "c", limit).shuffle(seed=5, window=2).batch(1).prefetch(2)
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], cache.usage())
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        got = [bytes(b[0]) for b in ds]
    finally:
        stop.set()
        watcher.join()
    assert sorted(got) == sorted(records)
    assert 0 < peak[0] <= limit
    assert cache.usage() <= limit
    downloads = gcs.whole_downloads(_sizes(url))
    assert sum(downloads.values()) >= shards  # every shard came in, some left again


@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_epoch_reads_nothing_from_gcs_once_all_is_cached(
    gcs, bucket, upload, tmp_path, workers
):
    url, records = upload_shards(upload, bucket, "warm", SHARDS, RECORDS)
    ds = _dataset(url, tmp_path / "c").shuffle(seed=2).repeat(2).workers(workers)
    it = iter(ds)
    first = [next(it) for _ in records]
    assert sorted(first) == sorted(records)
    assert gcs.counters.only(bucket).media_bytes > 0
    gcs.reset()
    second = list(it)
    assert sorted(second) == sorted(records) and second != first
    assert (gcs.counters.only(bucket).media_requests, gcs.counters.only(bucket).media_bytes) == (
        0,
        0,
    )
    # A restarted job (new source, same cache directory) downloads nothing either.
    again = list(_dataset(url, tmp_path / "c").shuffle(seed=2))
    assert sorted(again) == sorted(records)
    assert gcs.counters.only(bucket).media_bytes == 0


def test_a_damaged_cached_file_is_detected_and_fetched_again(gcs, bucket, upload, tmp_path):
    url, records = upload_shards(upload, bucket, "dmg", SHARDS, RECORDS)
    sizes = _sizes(url)
    source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    assert source.__getitems__(np.arange(len(source))) == records
    data = {f.remote.obj.name: f.remote.local_path() for f in source.files}
    names = sorted(data)
    # Truncated; one byte changed with the mtime put back; one byte changed under a live reader.
    os.truncate(data[names[0]], os.path.getsize(data[names[0]]) // 2)
    st = os.stat(data[names[1]])
    with open(data[names[1]], "r+b") as f:
        f.seek(70_000)
        byte = f.read(1)
        f.seek(70_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(data[names[1]], ns=(st.st_atime_ns, st.st_mtime_ns))
    with open(data[names[2]], "r+b") as f:
        f.seek(1000)
        f.write(b"\0" * 16)
    gcs.reset()
    assert source.__getitems__(np.arange(len(source))) == records  # same process, same source
    restarted = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    assert restarted.__getitems__(np.arange(len(restarted))[::-1]) == records[::-1]
    downloads = gcs.whole_downloads(sizes)
    assert {n for n, k in downloads.items() if k} == set(names[:3])
    assert all(k == 1 for n, k in downloads.items() if n in names[:3])


_SHARER = textwrap.dedent("""
    import hashlib, sys
    import tpufeed
    from tpufeed.sources.array_record import ArrayRecordSource
    from tpufeed.storage.cache.shard_cache import ShardCache
    url, cache_dir, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ds = tpufeed.Dataset.from_source(ArrayRecordSource(url, cache=ShardCache(cache_dir)))
    got = sorted(ds.shuffle(seed=seed).workers(1))
    print(len(got), hashlib.sha256(b"".join(got)).hexdigest())
""")


@pytest.mark.multiprocess
def test_two_processes_share_one_cache_dir(gcs, bucket, upload, tmp_path):
    url, records = upload_shards(upload, bucket, "shared", SHARDS, RECORDS)
    cache_dir = str(tmp_path / "shared-cache")
    gcs.reset()
    gcs.set_faults(slow=0.3, delay_s=0.05, seed=2)  # stretch downloads so the two overlap
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SHARER, url, cache_dir, str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        for seed in (1, 2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    import hashlib

    expected = f"{len(records)} {hashlib.sha256(b''.join(sorted(records))).hexdigest()}"
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert out.strip() == expected
    downloads = gcs.whole_downloads(_sizes(url))
    assert set(downloads.values()) == {1}  # each shard downloaded once, by one of the two
    cache = ShardCache(cache_dir)
    assert sorted(e.url for e in cache.entries()) == sorted(f"gs://{bucket}/{n}" for n in downloads)
    assert not [n for n in os.listdir(os.path.join(cache_dir, "shards")) if ".part-" in n]


def test_a_cold_first_batch_waits_only_for_the_shards_it_needs(gcs, bucket, upload, tmp_path):
    url, records = upload_shards(upload, bucket, "cold", SHARDS, RECORDS)
    source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))  # counts: footers only
    gcs.set_faults(slow_paths=r"part-0000[1-9]", delay_s=1.5)  # every shard but the first is slow
    start = time.monotonic()
    it = iter(tpufeed.Dataset.from_source(source).batch(RECORDS // 2))  # stored order
    first = next(it)
    first_s = time.monotonic() - start
    rest = list(it)
    total_s = time.monotonic() - start
    assert [bytes(r) for r in first] == records[: RECORDS // 2]
    assert first_s < 1.0 <= 1.5 <= total_s
    assert sum(len(b) for b in rest) == len(records) - RECORDS // 2


def test_uncached_tfrecord_reads_fetch_only_the_records_asked_for(
    gcs, bucket, upload, tmp_path, monkeypatch
):
    from tpufeed.sources.tfrecord import source as tfrecord

    monkeypatch.setattr(tfrecord, "_MAX_GAP", 4096)  # these files are small: a small gap
    url, records = upload_shards(upload, bucket, "tf", 2, 400, "tfrecord")
    total = sum(_sizes(url).values())
    no_cache = ShardCache(tmp_path / "c", 0)
    gcs.reset()
    source = TFRecordSource(url, cache=no_cache)  # builds the index: one streamed pass
    assert gcs.counters.only(bucket).media_bytes == total
    gcs.reset()
    again = TFRecordSource(url, cache=no_cache)  # the index is cached by generation
    assert gcs.counters.only(bucket).media_bytes == 0
    wanted = np.array([7, 5, 399, 6, 400, 790, 5])
    assert again.__getitems__(wanted) == [records[i] for i in wanted]
    assert 0 < gcs.counters.only(bucket).media_bytes < total // 20
    # GETs: records 5-7 (adjacent, one GET) and 399 of the first file; 400 and 790 (its 0 and 390).
    assert gcs.counters.only(bucket).media_requests == 4
    assert no_cache.usage() == 0 and not os.path.isdir(no_cache.shards_dir)
    assert len(source) == len(records)
