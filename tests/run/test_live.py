"""The live runs registry: a run that closes joins the finished tally, and nothing there can
keep a run from stopping its workers."""

import time

import pytest

import tpufeed
from tests.processes import leftovers, wait_for_workers
from tpufeed.run import live
from tpufeed.run.pipeline_run import PipelineRun


def _plus_one(x):
    return x + 1


def test_a_closed_run_joins_the_finished_tally_once():
    before, _ = live.totals()
    it = iter(tpufeed.Dataset.from_sequence(list(range(12))).batch(4))
    next(it)
    it.close()
    it.close()
    after, _ = live.totals()
    assert (after.batches - before.batches, after.records - before.records) == (1, 4)


@pytest.mark.multiprocess
def test_a_run_whose_figures_fail_still_stops_its_workers(monkeypatch):
    ds = tpufeed.Dataset.from_sequence(list(range(64))).map(_plus_one).batch(4).workers(2)
    it = iter(ds)
    next(it)
    assert len(wait_for_workers(2)) == 2

    def broken(run):
        raise RuntimeError("figures broke")

    monkeypatch.setattr(PipelineRun, "figures", broken)
    with pytest.raises(RuntimeError, match="figures broke"):
        it.close()
    deadline = time.monotonic() + 10
    while leftovers() != ([], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers() == ([], [])
