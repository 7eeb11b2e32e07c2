"""The timeline: a ring of trace events, joined and left by its recorders, and the file of a
2-worker run (a track per process, the workers' stage spans covering their busy time)."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest

import tpufeed
from tests.observe.trace_events import names_of_processes, names_of_threads, read_trace, seconds_by
from tpufeed.observe import timeline


@pytest.fixture(autouse=True)
def nothing_records():
    """Each test starts and ends with no timeline recording in this process."""
    timeline.stop()
    yield
    assert timeline.recording() is None, "a test left a timeline recording"


def _slow(x: int) -> dict:
    """A record that takes about 0.3 ms of a core to make."""
    started = time.perf_counter()
    while time.perf_counter() - started < 0.0003:
        pass
    return {"x": np.full(4, x, np.int64)}


def test_the_ring_keeps_the_last_events_and_counts_the_dropped(tmp_path):
    recorded = timeline.start(capacity=3)
    for i in range(5):
        timeline.instant(f"e{i}")
    timeline.stop()
    assert [e["name"] for e in recorded.trace_events() if e["ph"] != "M"] == ["e2", "e3", "e4"]
    assert recorded.dropped == 2
    document = read_trace(recorded.write(tmp_path / "ring.json"))
    other = document["otherData"]
    assert {k: other[k] for k in ("producer", "capacity", "dropped_events")} == {
        "producer": "tpufeed",
        "capacity": 3,
        "dropped_events": 2,
    }


def test_the_file_places_its_recording_on_the_host_and_its_clocks(tmp_path):
    """ts 0 is the recording's start on the trace clock and the wall clock, taken together;
    one process outside a multi-host run has no offset to process 0 (`tpufeed trace merge`)."""
    before_ns, before_unix = time.perf_counter_ns(), time.time_ns()
    recorded = timeline.start()
    after_ns, after_unix = time.perf_counter_ns(), time.time_ns()
    timeline.stop()
    other = read_trace(recorded.write(tmp_path / "placed.json"))["otherData"]
    assert other["host"] == {"hostname": socket.gethostname(), "pid": os.getpid()}
    assert before_ns <= other["clock"]["trace_origin_ns"] <= after_ns
    assert before_unix <= other["clock"]["unix_origin_ns"] <= after_unix
    assert other["pod_clock"] is None


def test_a_tiny_capacity_bounds_a_runs_file(tmp_path):
    ds = tpufeed.Dataset.from_sequence(range(64)).map(lambda x: x + 1).batch(4)
    with tpufeed.trace(tmp_path / "small.json", capacity=5):
        assert len(list(ds)) == 16
    document = read_trace(tmp_path / "small.json")
    events = [e for e in document["traceEvents"] if e["ph"] != "M"]
    assert len(events) == 5
    # 16 items and the end: a "next" each, and a read, map and batch stage per chunk
    assert document["otherData"]["dropped_events"] >= 17 + 3 * 16 - 5
    assert events[-1]["name"] == "next"  # the last: the wait that found the end


def test_a_timeline_records_until_the_last_that_joined_leaves():
    first = timeline.join(capacity=10)
    second = timeline.join(capacity=99)
    assert second is first and first.capacity == 10  # the one who started it decides
    timeline.leave(first)
    assert timeline.recording() is first
    timeline.leave(second)
    assert timeline.recording() is None
    again = timeline.join(resume=first)  # records on into the same events
    assert again is first
    timeline.leave(again)


def test_a_span_is_recorded_even_when_its_block_raises():
    recorded = timeline.start()
    with pytest.raises(ValueError), timeline.span("doomed"):
        raise ValueError("x")
    timeline.stop()
    assert [e[0] for e in recorded.events] == ["doomed"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("fork_server", ["1", "0"], ids=["forked", "fresh-interpreters"])
def test_a_two_worker_run_has_a_track_per_process(tmp_path, monkeypatch, fork_server):
    monkeypatch.setenv("TPUFEED_FORKSERVER", fork_server)
    records = 1024
    ds = tpufeed.Dataset.from_sequence(range(records)).map(_slow).batch(8).workers(2, isolate=True)
    with tpufeed.trace(tmp_path / "run.json"):
        it = ds.iterator()
        items = sum(1 for _ in it)
        stats = it.stats()
    document = read_trace(tmp_path / "run.json")
    processes = names_of_processes(document)
    assert processes[os.getpid()] == "tpufeed consumer"
    assert sorted(processes.values()) == [
        "tpufeed consumer",
        "tpufeed worker 0",
        "tpufeed worker 1",
    ]
    threads = names_of_threads(document)
    nexts = [e for e in document["traceEvents"] if e["name"] == "next"]
    assert len(nexts) == items + 1 and all(e["pid"] == os.getpid() for e in nexts)
    assert {threads[(e["pid"], e["tid"])] for e in nexts} == {"MainThread"}

    chunks = seconds_by(document, "chunk")
    stages = seconds_by(document, "stage")
    workers = [pid for pid in processes if pid != os.getpid()]
    for pid in workers:
        # Busy time: the worker's chunk spans, each from a task's arrival to its answer made.
        busy = chunks[pid]["chunk"]
        assert busy > 0
        assert sum(stages[pid].values()) >= 0.9 * busy, (processes[pid], stages[pid], busy)
    # Every task's span arrived: together they read each record once.
    read = sum(e["args"]["records"] for e in document["traceEvents"] if e.get("cat") == "chunk")
    assert read == records
    # The workers' stage spans are the stage seconds the run's statistics report.
    for stage in ("read", "map(_slow)", "batch"):
        spans = sum(stages[pid][stage] for pid in workers)
        assert spans == pytest.approx(stats.stages[stage].seconds, rel=1e-3, abs=1e-4)


def _threads_of(document) -> dict[str, set[str]]:
    """Per thread track name: the names of the events on it."""
    threads = names_of_threads(document)
    out: dict[str, set[str]] = {}
    for e in document["traceEvents"]:
        if e["ph"] != "M":
            out.setdefault(threads[(e["pid"], e["tid"])], set()).add(e["name"])
    return out


def test_the_prefetch_and_transfer_threads_have_tracks_of_their_own(tmp_path):
    pytest.importorskip("jax")
    ds = tpufeed.Dataset.from_sequence(range(64)).map(_slow).batch(8).prefetch(2)
    with tpufeed.trace(tmp_path / "run.json"):
        with ds.to_jax(prefetch=2) as it:
            assert sum(1 for _ in it) == 8
    threads = _threads_of(read_trace(tmp_path / "run.json"))
    assert threads["MainThread"] == {"next"}  # the loop only waits: the work is elsewhere
    assert {"next", "to_device"} <= threads["tpufeed to_device"]
    assert {"read", "map(_slow)", "batch"} <= threads["tpufeed prefetch"]
