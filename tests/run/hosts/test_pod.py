"""The pod's summary and verdict in one process (issue 46 item 1): what a host measures, how a
summary travels, when a host stands out, what process 0 logs and when it stays quiet.
tests/run/hosts/test_pod_processes.py runs them over real JAX and torch.distributed processes."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time

import pytest

import tpufeed
from tpufeed.errors import CorruptDataError, InvalidArgumentError
from tpufeed.run.hosts import pod
from tpufeed.run.hosts.pod import PodSharer
from tpufeed.run.hosts.pod_summary import HostSummary, Meter, PodStats, host_cpu_times
from tpufeed.run.hosts.pod_verdict import Verdicts, fresh, judge
from tpufeed.run.hosts.torch_store import StoreClient
from tpufeed.run.metrics import PipelineCollector


def summary(host, wait, bottleneck="map(decode)", age=0.0, hosts=4, **kw):
    fields = dict(
        host=host,
        hosts=hosts,
        records_per_s=1000.0,
        wait_fraction=wait,
        bottleneck=bottleneck,
        cpu_busy=1.0,
        cores=96,
        cache_hit_rate=None,
        shm_bytes=0,
        interval_s=30.0,
        taken_at=time.time() - age,
        age_s=age,
    )
    return HostSummary(**{**fields, **kw})


def test_a_host_whose_input_wait_stands_out_holds_the_step():
    hosts = [summary(h, w, "read") for h, w in enumerate([0.02, 0.01, 0.03])]
    hosts.append(summary(3, 0.38, "map(decode)"))
    verdict = judge(hosts, 32)
    assert verdict is not None and (verdict.kind, verdict.host) == ("host", 3)
    assert verdict.line == (
        "host 3 of 32 holds the step: input wait 38% (median 2%), bottleneck: map(decode), "
        "CPU 100% of 96 cores"
    )


@pytest.mark.parametrize(
    "waits",
    [
        [0.01, 0.01, 0.01, 0.03],  # noise around a low median: not 10 points above it
        [0.05, 0.06, 0.04, 0.09],  # 4 points above, and the median under 10%
        [0.0, 0.0, 0.0, 0.0],
    ],
)
def test_no_verdict_where_no_host_stands_out_and_the_pod_is_not_input_bound(waits):
    assert judge([summary(h, w) for h, w in enumerate(waits)], 4) is None


def test_a_spread_around_a_high_median_is_the_pod_input_bound_not_one_host():
    waits = [0.35, 0.40, 0.46, 0.55]  # the highest is 15 points above the others' median
    hosts = [summary(h, w, "read" if h == 0 else "map(decode)") for h, w in enumerate(waits)]
    verdict = judge(hosts, 4)
    assert verdict is not None and verdict.kind == "pod" and verdict.host is None
    assert verdict.line == (
        "the pod is input-bound: input wait 43% (median of 4 hosts; host 3 the most, 55%), "
        "bottleneck: map(decode) on 3 of 4 hosts, CPU 100% of 96 cores (median)"
    )


def test_one_host_has_no_one_to_stand_out_from_and_cpu_not_measured_is_said():
    assert judge([summary(0, 0.9)], 1) is None
    two = judge([summary(0, 0.01), summary(1, 0.5, cpu_busy=None)], 2)
    assert two is not None and two.host == 1 and two.line.endswith("CPU not measured, 96 cores")


def test_a_summary_older_than_three_intervals_is_left_out():
    hosts = [summary(0, 0.01, age=10), summary(1, 0.5, age=91), summary(2, 0.02, age=89)]
    assert [s.host for s in fresh(hosts, 30.0)] == [0, 2]
    assert [s.host for s in fresh(hosts, 31.0)] == [0, 1, 2]  # judged by the longer interval


def test_process_0_logs_a_verdict_once_then_its_changes_and_its_end():
    verdicts = Verdicts()
    quiet = [summary(h, 0.02) for h in range(4)]
    held = [*quiet[:3], summary(3, 0.5)]
    assert verdicts.update(quiet, 4, 30.0) == []
    first = verdicts.update(held, 4, 30.0)
    assert len(first) == 1 and first[0].startswith("host 3 of 4 holds the step")
    assert verdicts.update([*quiet[:3], summary(3, 0.6)], 4, 30.0) == []  # the same verdict
    moved = verdicts.update([*quiet[:3], summary(3, 0.6, "read")], 4, 30.0)
    assert len(moved) == 1 and "bottleneck: read" in moved[0]  # its stage changed
    assert verdicts.update(quiet, 4, 30.0) == [
        "input no longer holds the pod's step: median input wait 2% over 4 hosts"
    ]
    assert verdicts.update(quiet, 4, 30.0) == []


def test_a_host_that_stops_sharing_is_said_once_and_again_after_it_came_back():
    verdicts = Verdicts()
    live = [summary(h, 0.02) for h in range(3)]
    gone = [*live, summary(3, 0.02, age=100)]
    lines = verdicts.update(gone, 4, 30.0)
    assert lines == [
        "host 3 of 4 has shared nothing for 100 s (one summary every 30 s): it is gone, "
        "stopped or cut off; its last summary is left out of the verdict"
    ]
    assert verdicts.update(gone, 4, 30.0) == []
    assert verdicts.update([*live, summary(3, 0.02)], 4, 30.0) == []
    assert len(verdicts.update(gone, 4, 30.0)) == 1


def test_a_summary_travels_as_small_json_and_is_aged_by_its_reader():
    sent = summary(5, 0.25, cache_hit_rate=0.5, shm_bytes=1 << 20)
    text = sent.to_json()
    assert len(text) < 400 and "age_s" not in text
    got = HostSummary.from_json(text, "tpufeed/pod/5", sent.taken_at + 7.5)
    assert got == dataclasses.replace(sent, age_s=7.5)
    later = text[:-1] + ',"a_later_figure":1}'  # a later version's summary: its extra is left
    assert HostSummary.from_json(later, "tpufeed/pod/5", sent.taken_at) == sent


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '"x"', '{"host": 1}', summary(1, 0.1).to_json().replace('"host":1', '"host":"x"')],
)
def test_a_value_that_is_no_summary_is_a_named_error(text):
    with pytest.raises(CorruptDataError, match="pod summary 'tpufeed/pod/1'"):
        HostSummary.from_json(text, "tpufeed/pod/1", time.time())


def test_the_meter_measures_what_ran_since_its_last_reading():
    def decode(x):
        time.sleep(0.002)
        return x

    meter = Meter(0, 1)
    for _ in iter(tpufeed.Dataset.from_sequence(list(range(60))).map(decode).batch(6)):
        time.sleep(0.001)
    taken = meter.take()
    assert taken.bottleneck == "map(decode)" and taken.records_per_s > 0
    assert 0.3 < taken.wait_fraction <= 1.0  # decode runs inside next(): the step waits on it
    assert taken.cores >= 1 and taken.host == 0 and taken.hosts == 1
    idle = meter.take()
    assert idle.records_per_s == 0 and idle.bottleneck is None and idle.wait_fraction == 0


@pytest.mark.multiprocess
def test_the_meter_counts_workers_stages_at_their_parallelism():
    def decode(x):
        time.sleep(0.002)
        return x

    meter = Meter(0, 1)
    ds = tpufeed.Dataset.from_sequence(list(range(64))).map(decode).batch(8).workers(2)
    assert sum(len(b) for b in ds) == 64
    assert meter.take().bottleneck == "map(decode)"


def test_host_cpu_is_read_from_proc_stat_over_the_cores_the_process_may_use():
    busy, total = host_cpu_times() or (None, None)
    assert busy is not None and 0 < busy <= total
    one = host_cpu_times(frozenset({min(os.sched_getaffinity(0))}))
    assert one is not None and 0 <= one[0] <= one[1] <= total
    assert host_cpu_times(frozenset({10**6})) is None  # no such core
    assert Meter(0, 1).take().cores == len(os.sched_getaffinity(0))


def test_pod_stats_with_one_host_is_this_hosts_own():
    stats = tpufeed.pod_stats()
    assert isinstance(stats, PodStats) and stats.host_count == 1 and stats.missing == ()
    assert [s.host for s in stats.hosts] == [0] and stats.host(0) is stats.hosts[0]
    assert stats.verdict is None and stats.host(1) is None
    assert stats.summary().startswith("1 of 1 hosts' input pipelines\nhost    0")
    assert stats.to_dict()["hosts"][0]["host"] == 0


@pytest.mark.parametrize("bad", [0, -1, "1", True])
def test_pod_stats_timeout_must_be_a_positive_number(bad):
    with pytest.raises(InvalidArgumentError, match="timeout_s must be a positive number"):
        tpufeed.pod_stats(timeout_s=bad)


def test_one_host_shares_nothing_and_exports_no_pod_metrics():
    ds = tpufeed.Dataset.from_sequence([1, 2, 3]).options(pod_interval_s=0.1)
    assert list(ds) == [1, 2, 3]
    assert pod.latest() is None
    names = {family.name for family in PipelineCollector().collect()}
    assert not any(name.startswith("tpufeed_pod") for name in names)


def test_pod_interval_s_is_an_option_30_s_by_default():
    ds = tpufeed.Dataset.from_sequence([1])
    assert ds.options().pod_interval_s == 30.0
    assert ds.options(pod_interval_s=5).options().pod_interval_s == 5
    assert ds.options(pod_interval_s=None).options().pod_interval_s is None


@pytest.mark.parametrize("bad", [0, -1.5, "30", True])
def test_pod_interval_s_must_be_a_positive_number_or_none(bad):
    with pytest.raises(InvalidArgumentError, match="pod_interval_s must be a positive number"):
        tpufeed.Dataset.from_sequence([1]).options(pod_interval_s=bad)


@pytest.mark.slow
def test_through_to_jax_the_wait_is_the_training_loops_not_the_transfer_threads():
    """to_jax's thread takes batches ahead: the pipeline's own next() waits there, while the
    loop, stepping longer than a batch takes, does not wait."""
    pytest.importorskip("jax")

    def decode(x):
        time.sleep(0.002)  # 8 ms a batch of 4, under the loop's 20 ms step
        return {"x": x}

    ds = tpufeed.Dataset.from_sequence(list(range(200))).map(decode).batch(4)
    meter = Meter(0, 1)
    for _ in ds:  # the same loop over the pipeline itself: next() makes each batch
        time.sleep(0.02)
    assert meter.take().wait_fraction > 0.15
    it = ds.to_jax(prefetch=2)
    for _ in it:
        time.sleep(0.02)
    assert meter.take().wait_fraction < 0.15


@pytest.mark.slow
def test_a_sharer_over_a_real_store_says_a_value_no_tpufeed_wrote_once_and_goes_on(caplog):
    """Process 0's rounds over torch's own TCPStore (no process group needed): a key of
    another writer under tpufeed/pod/ is said once (a warning naming it), not every round."""
    store_type = pytest.importorskip("torch.distributed").TCPStore
    store = store_type("127.0.0.1", 0, 1, True, wait_for_workers=False)
    client = StoreClient(store, 2)
    client.key_value_set("tpufeed/pod/1", "not a summary")
    running = threading.Event()
    running.set()
    with caplog.at_level(logging.DEBUG, logger="tpufeed"):
        sharer = PodSharer(client, "the test's store", 0, 2, 0.02, running.is_set)
        deadline = time.monotonic() + 30
        while len([r for r in caplog.records if "not shared" in r.message]) < 4:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.02)
        client.key_value_set("tpufeed/pod/1", summary(1, 0.02, hosts=2).to_json())
        while sharer.latest() is None:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.02)
        running.clear()
    failed = [r for r in caplog.records if "not shared" in r.message]
    assert [r.levelno for r in failed[:2]] == [logging.WARNING, logging.DEBUG]
    assert "pod summary 'tpufeed/pod/1' is not one tpufeed shares" in failed[0].message
    assert [s.host for s in (sharer.latest() or PodStats((), 2)).hosts] == [0, 1]
