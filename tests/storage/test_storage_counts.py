"""What storage counts (`tpufeed.observe.counts`) against what the fault proxy saw: GCS requests,
retries and bytes, shard-cache hits, misses, evictions and bytes fetched (issue 28)."""

from __future__ import annotations

import pytest

import tpufeed
from tests.gcs_emulator import upload_shards
from tpufeed.observe import counts
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.stores.gcs import list_objects

pytestmark = pytest.mark.emulator

SHARDS, RECORDS = 4, 150


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_retries_counted_are_the_faults_injected(gcs, bucket, upload, tmp_path, workers):
    url, records = upload_shards(upload, bucket, "faulty", SHARDS, RECORDS)
    sizes = {o.name: o.size for o in list_objects(url)}
    gcs.reset()
    gcs.set_faults(error_503=0.2, reset=0.1, seed=7)
    before = counts.snapshot()
    ds = tpufeed.Dataset.from_array_record(url, cache_dir=tmp_path / "c").workers(workers)
    it = ds.iterator()
    got = list(it)
    counted = counts.since(before)
    seen = gcs.counters.only(bucket)
    assert sorted(got) == sorted(records)
    assert gcs.counters.faults > 0  # the test means something
    assert counted["gcs_retries"] == gcs.counters.faults
    assert counted["gcs_requests"] == seen.requests
    assert counted["gcs_bytes"] == seen.media_bytes
    # Every shard was fetched into the cache once, whole; each was opened from it.
    assert counted["cache_bytes"] == sum(sizes.values())
    assert counted["cache_misses"] + counted["cache_hits"] >= SHARDS
    assert counted["cache_evictions"] == 0
    assert counted["bytes_read"] == sum(map(len, records))
    # The run reports its own share: everything read happened after it started.
    run = it.stats().counts
    assert run["bytes_read"] == counted["bytes_read"]
    assert (
        run["cache_hits"] + run["cache_misses"] == counted["cache_hits"] + counted["cache_misses"]
    )
    summary = it.stats().summary()
    assert "shard cache:" in summary and "GCS:" in summary


def test_a_small_cache_counts_its_evictions_and_every_fetch(gcs, bucket, upload, tmp_path):
    shards = 6
    url, records = upload_shards(upload, bucket, "small", shards, RECORDS)
    sizes = {o.name: o.size for o in list_objects(url)}
    limit = 2 * ShardCache(tmp_path / "c", 0).footprint(max(sizes.values()))
    before = counts.snapshot()
    ds = tpufeed.Dataset.from_array_record(url, cache_dir=tmp_path / "c", cache_bytes=limit)
    got = list(ds.shuffle(seed=1, window=1).repeat(2))
    counted = counts.since(before)
    assert sorted(got) == sorted(records * 2)
    fetched = gcs.whole_downloads(sizes)  # what the proxy served as whole shards
    assert counted["cache_bytes"] == sum(n * sizes[name] for name, n in fetched.items())
    # A cache of 2 shards reads 12 shard-epochs: every fetch past the second made room.
    assert counted["cache_evictions"] >= sum(fetched.values()) - 2 > 0
    assert counted["gcs_retries"] == 0
