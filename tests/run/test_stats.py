"""Per-stage statistics: they add up, and they name the slow stage."""

import json
import time

import numpy as np
import pytest

import tpufeed


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
