"""workers("auto") / prefetch("auto"): measured choices, within the RAM budget."""

import time

import numpy as np
import pytest

import tpufeed
from tpufeed.run.autotune import Options, Tuning, pipeline_bytes, workers_for


def cheap():
    return tpufeed.Dataset.from_sequence(list(range(2000))).map(lambda i: np.full(16, i)).batch(32)


def costly():
    def work(i):
        time.sleep(0.0005)  # 16 ms a batch: long enough for a worker on every core
        return np.full(64, i, np.float32)

    return tpufeed.Dataset.from_sequence(list(range(600))).map(work).batch(32)


def test_cheap_work_stays_in_process_and_costly_work_gets_workers():
    it = cheap().workers("auto").prefetch("auto").iterator()
    assert it.stats().workers == 0 and "in-process" in it.stats().tuning
    assert len(list(it)) == 63
    it = costly().workers("auto").prefetch("auto").iterator()
    assert it.stats().workers >= 2 and it.stats().prefetch >= 1
    expected = [b.tolist() for b in costly()]
    assert [b.tolist() for b in it] == expected


@pytest.mark.parametrize("cores", [1, 2, 8, 96])
def test_workers_for_leaves_the_parent_a_core_when_batches_are_short(cores):
    big_budget = 1 << 50
    assert workers_for(0.001, cores, 1000, big_budget)[0] == 0  # IPC costs more than it saves
    short, why = workers_for(0.004, cores, 1000, big_budget)
    long_, _ = workers_for(0.050, cores, 1000, big_budget)
    if cores == 1:
        assert (short, long_) == (0, 0)
        return
    assert (short, long_) == (cores - 1, cores)
    assert "one core left to the parent" in why
    fits, why = workers_for(0.050, cores, 1000, pipeline_bytes(1, 2, 1000))
    assert fits == 1 and "1 workers fit the" in why


def test_a_tiny_ram_budget_is_respected():
    budget = 10_000
    it = costly().workers("auto").prefetch("auto").options(ram_budget_bytes=budget).iterator()
    batch_bytes = 32 * 64 * 4
    stats = it.stats()
    assert stats.workers == 0 and "budget" in stats.tuning
    assert pipeline_bytes(0, stats.prefetch, batch_bytes) <= budget
    for _ in it:
        pass  # a consumer that always waits must not grow prefetch past the budget
    assert pipeline_bytes(0, it.stats().prefetch, batch_bytes) <= budget


def test_prefetch_deepens_while_the_consumer_waits_within_budget():
    ds = costly().workers(0).prefetch("auto").options(ram_budget_bytes=64 * 32 * 4 * 6)
    it = ds.iterator()
    start = it.stats().prefetch
    list(it)
    end = it.stats().prefetch
    assert start < end <= 6  # the consumer always waits here, so prefetch grows


def test_fixed_values_are_kept_and_bad_ones_rejected():
    it = costly().workers(1).prefetch("auto").iterator()
    assert it.stats().workers == 1
    it.close()
    with pytest.raises(tpufeed.InvalidArgumentError, match="'auto'"):
        cheap().workers("many")
    with pytest.raises(tpufeed.InvalidArgumentError, match="ram_budget_bytes"):
        cheap().options(ram_budget_bytes=-1)


def test_pipeline_bytes_counts_buffers_and_workers():
    assert pipeline_bytes(0, 3, 1000) == 3000
    assert pipeline_bytes(2, 2, 1000) > 2 * 80 * 2**20
    tuning = Tuning(0, 2, 1e-6, 1000, 10**6, "test")
    assert tuning.buffer_bytes() == 2000 and tuning.buffer_bytes(prefetch=5) == 5000
    assert Options(ram_budget_bytes=5).budget() == 5
    assert Options().budget() > 0
