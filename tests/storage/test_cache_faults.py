"""The shard cache under faults: a downloader killed with SIGKILL, and two processes reading
and evicting in one small cache directory at the same time."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.gcs_emulator import upload_shards
from tests.storage.test_cache_edges import DiskWatch
from tpufeed.sources.array_record import ArrayRecordSource
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.stores.gcs import list_objects

pytestmark = [pytest.mark.emulator, pytest.mark.multiprocess]

_DOWNLOADER = """
import sys
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.stores.gcs import list_objects
url, cache_dir, limit = sys.argv[1:]
with ShardCache(cache_dir, int(limit)).pinned(list_objects(url)[0]):
    print("finished", flush=True)
"""


def _child(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _parts(cache_dir: str) -> list[str]:
    try:
        return [n for n in os.listdir(os.path.join(cache_dir, "shards")) if ".part-" in n]
    except FileNotFoundError:
        return []


@pytest.mark.timeout(120)
def test_a_download_killed_midway_is_never_read_and_its_space_comes_back(
    gcs, bucket, upload, tmp_path
):
    url, records = upload_shards(upload, bucket, "killed", 1, 2000)  # ~1.2 MB
    (obj,) = list_objects(url)
    cache_dir = str(tmp_path / "c")
    limit = ShardCache(cache_dir, 0).footprint(obj.size)  # room for this shard, no more
    gcs.set_faults(mbps=0.3)  # a download of ~4 s, to be killed in the middle of
    child = _child(_DOWNLOADER, url, cache_dir, str(limit))
    try:
        while not _parts(cache_dir) and child.poll() is None:
            time.sleep(0.02)
        time.sleep(0.5)  # some bytes have landed
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, err
    assert _parts(cache_dir)  # the half file it left
    gcs.reset()
    cache = ShardCache(cache_dir, limit)
    assert not cache.contains(obj)  # a part is never taken for the copy
    source = ArrayRecordSource(url, cache=cache)
    assert source.__getitems__(list(range(len(source)))) == records  # fetched again, whole
    assert not _parts(cache_dir) and cache.usage() == limit  # its space came back


_SHARER = """
import hashlib, sys
import tpufeed
url, cache_dir, limit, seed = sys.argv[1:]
ds = tpufeed.Dataset.from_array_record(url, cache_dir=cache_dir, cache_bytes=int(limit))
got = sorted(bytes(b[0]) for b in ds.shuffle(seed=int(seed), window=2).batch(1).prefetch(2))
print(len(got), hashlib.sha256(b"".join(got)).hexdigest())
"""


@pytest.mark.timeout(240)
def test_two_processes_reading_and_evicting_in_one_small_cache_lose_nothing(
    gcs, bucket, upload, tmp_path
):
    url, records = upload_shards(upload, bucket, "sharing", 6, 150)
    shard_bytes = max(o.size for o in list_objects(url))
    cache_dir = str(tmp_path / "c")
    limit = 4 * shard_bytes  # two readers of a window of 2: evictions all along
    gcs.set_faults(slow=0.3, delay_s=0.02, seed=3)  # downloads overlap and interleave
    with DiskWatch(ShardCache(cache_dir, limit)) as watch:
        children = [_child(_SHARER, url, cache_dir, str(limit), str(seed)) for seed in (1, 2)]
        outputs = [child.communicate(timeout=200) for child in children]
    expected = f"{len(records)} {hashlib.sha256(b''.join(sorted(records))).hexdigest()}"
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0, err
        assert out.strip() == expected  # every record once, none torn
    assert 0 < watch.peak <= limit, f"peak {watch.peak:,} bytes on disk, limit {limit:,}"
    downloads = gcs.whole_downloads({o.name: o.size for o in list_objects(url)})
    assert sum(downloads.values()) > 6  # shards were evicted and fetched again
    assert not _parts(cache_dir)
    cache = ShardCache(cache_dir, limit)
    assert cache.usage() <= limit
    for entry in cache.entries():  # what stays is whole and checked
        (obj,) = list_objects(entry.url)
        assert cache.contains(obj)
