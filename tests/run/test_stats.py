"""Per-stage statistics: they add up, and they name the slow stage."""

import json
import os
import time

import numpy as np
import pytest

import tpufeed
from tpufeed.run.stats import WAIT_BUCKETS


def slow(e):
    time.sleep(0.002)
    return e


def pipeline(workers):
    return (
        tpufeed.Dataset.from_sequence(list(range(400)))
        .shuffle(1)
        .map(lambda i: {"x": np.full(8, i)})
        .map(slow)
        .filter(lambda e: e["x"][0] % 4 != 0)
        .batch(10, drop_remainder=True)
        .workers(workers)
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_stats_add_up_and_name_the_slow_stage(workers):
    it = pipeline(workers).iterator()
    batches = list(it)
    stats = it.stats()
    assert stats.batches == len(batches) == 30 and stats.records == 300
    assert stats.bottleneck == "map(slow)"
    assert set(stats.stages) >= {"read", "map(<lambda>)", "map(slow)", "filter(<lambda>)", "batch"}
    assert stats.stages["read"].records == 400 and stats.stages["batch"].records == 300
    slow_seconds = stats.stages["map(slow)"].seconds
    assert 400 * 0.002 <= slow_seconds
    # Work spread over the processes cannot take longer than the wall clock.
    busy = sum(s.seconds / s.parallelism for s in stats.stages.values())
    assert busy <= stats.wall_seconds * 1.05
    assert 0 <= stats.wait_fraction <= 1
    assert stats.memory_bytes > 0
    text = stats.summary()
    assert "map(slow)" in text and "<- bottleneck" in text
    assert json.loads(json.dumps(stats.to_dict()))["bottleneck"] == "map(slow)"


def test_wait_is_small_when_the_consumer_is_slower_than_the_pipeline():
    it = tpufeed.Dataset.from_sequence(list(range(200))).batch(10).prefetch(4).iterator()
    for _ in it:
        time.sleep(0.01)
    assert it.stats().wait_fraction < 0.2


@pytest.fixture
def shards(tmp_path):
    """Three local ArrayRecord files of 200 records each: (glob, every record)."""
    from tpufeed.sources.array_record import write_array_records

    everything = []
    for s in range(3):
        records = [f"shard {s} record {i} ".encode() * (1 + i % 5) for i in range(200)]
        write_array_records(str(tmp_path / f"part-{s}.array_record"), records)
        everything += records
    return str(tmp_path / "part-*.array_record"), everything


@pytest.mark.multiprocess
def test_per_worker_shares_add_up_to_the_run(shards):
    url, records = shards
    ds = tpufeed.Dataset.from_array_record(url).map(slow).batch(20).workers(2, isolate=True)
    it = ds.iterator()
    got = [r for batch in it for r in batch]
    stats = it.stats()
    assert sorted(got) == sorted(records)
    assert stats.counts["bytes_read"] == sum(map(len, records))
    assert stats.counts["workers_started"] == 2
    workers = stats.per_worker
    assert [w.worker for w in workers] == [0, 1] and all(w.pid > 0 for w in workers)
    # Isolated, the parent reads nothing: the workers' shares are the whole run's.
    assert sum(w.counts.get("bytes_read", 0) for w in workers) == stats.counts["bytes_read"]
    for stage in ("read", "map(slow)"):
        assert sum(w.stages[stage].records for w in workers) == stats.stages[stage].records
        assert sum(w.stages[stage].seconds for w in workers) == pytest.approx(
            stats.stages[stage].seconds
        )
    assert all(w.counts.get("bytes_read", 0) > 0 for w in workers)  # both did some
    table = stats.summary().splitlines()
    assert any(line.startswith("worker ") for line in table)
    as_dict = json.loads(json.dumps(stats.to_dict()))
    assert [w["worker"] for w in as_dict["per_worker"]] == [0, 1]


def test_the_wait_histogram_counts_every_next():
    it = tpufeed.Dataset.from_sequence(list(range(50))).batch(5).iterator()
    items = list(it)
    stats = it.stats()
    assert len(stats.wait_histogram) == len(WAIT_BUCKETS) + 1
    assert sum(stats.wait_histogram) == len(items) == stats.batches
    assert stats.to_dict()["wait_histogram"]["counts"] == list(stats.wait_histogram)


def test_the_summary_says_batches_or_elements_as_the_pipeline_hands_them_out():
    """Issue 47: "300 records in 30 items" where users think of batches."""
    it = pipeline(0).iterator()
    list(it)
    assert it.stats().summary().startswith("300 records in 30 batches over ")
    it = tpufeed.Dataset.from_sequence(list(range(7))).iterator()
    list(it)
    assert it.stats().summary().startswith("7 records in 7 elements over ")


def test_tuning_says_which_rule_chose_the_workers_and_the_prefetch():
    """Issue 47: stats().tuning said why the workers were chosen, and nothing of prefetch."""
    it = tpufeed.Dataset.from_sequence(list(range(64))).batch(8).workers("auto")
    it = it.prefetch("auto").iterator()
    tuning = it.stats().tuning
    assert tuning.startswith("workers 0: a batch takes ") and "cheaper in-process" in tuning
    assert tuning.endswith("; prefetch 2: 2 batches ahead, in-process")
    it.close()
    it = tpufeed.Dataset.from_sequence(list(range(64))).batch(8).workers(0).prefetch("auto")
    it = it.options(ram_budget_bytes=1).iterator()
    tuning = it.stats().tuning
    assert tuning.startswith("workers 0: set by the user; prefetch 0: 2 batches ahead, in-process")
    assert tuning.endswith("cut to 0 by the 1 byte budget")
    it.close()


def stage_records(stats):
    return {name: stage.records for name, stage in stats.stages.items()}


@pytest.mark.multiprocess
def test_stage_counts_hold_the_chunks_the_calling_process_made():
    """Issue 47: with workers, stage counts left out the batches the consumer made itself (the
    `auto` warm-up's, which it hands on as the run's first). Each stage counts every element
    it made, wherever: the workers' shares and the calling process's (`here`) add up to it."""
    ds = tpufeed.Dataset.from_sequence(list(range(400))).map(slow).batch(10)
    it = ds.workers(2).prefetch("auto").iterator()
    got = [int(r) for batch in it for r in batch]
    stats = it.stats()
    assert sorted(got) == list(range(400)) and stats.records == 400 and stats.batches == 40
    counted = stage_records(stats)
    assert {n: counted[n] for n in ("read", "map(slow)", "batch")} == dict.fromkeys(
        ("read", "map(slow)", "batch"), 400
    )
    here = stats.here
    assert here["map(slow)"].records > 0  # the warm-up's chunks, at least, were made here
    for name in ("read", "map(slow)", "batch"):
        theirs = sum(w.stages[name].records for w in stats.per_worker if name in w.stages)
        assert theirs + here[name].records == 400
    rows = {line.split()[0]: line.split() for line in stats.summary().splitlines()}
    assert rows["here"][1] == str(os.getpid()) and "0" in rows and "1" in rows
    assert stats.summary().splitlines()[-1].startswith("here: this process's share")
    as_dict = json.loads(json.dumps(stats.to_dict()))
    assert as_dict["here"]["map(slow)"]["records"] == here["map(slow)"].records
    assert as_dict["pid"] == os.getpid()


def test_stage_counts_hold_the_warm_ups_chunks_without_workers():
    """prefetch("auto") measures on the first chunks and hands them on: they count too."""
    it = tpufeed.Dataset.from_sequence(list(range(64))).batch(8).prefetch("auto").iterator()
    assert sum(len(b) for b in it) == 64
    stats = it.stats()
    assert stats.workers == 0 and stage_records(stats) == {"read": 64, "batch": 64}
    assert stats.here["read"].records == 64 and "here" not in stats.summary()
