"""DatasetIterator: get_state/set_state on a live iterator, whatever runs behind it."""

import gc
import glob
import logging
import os
import time

import numpy as np
import pytest

import tpufeed
from tests.processes import worker_processes
from tpufeed.errors import StateError
from tpufeed.observe import timeline
from tpufeed.run.hosts.agreement import ThreadAgreement


def source(n=120):
    return tpufeed.Dataset.from_sequence(
        [{"id": np.int64(i), "x": np.full(3, i)} for i in range(n)]
    )


def ids(items):
    return [item["id"].tolist() for item in items]


def take(it, k):
    return [next(it) for _ in range(k)]


PIPELINES = {
    "batch": lambda ds: ds.shuffle(3).batch(7).repeat(2),
    "filter": lambda ds: ds.shuffle(3).filter(lambda e: e["id"] % 3 != 1).batch(5).repeat(2),
    "flat_map": lambda ds: ds.flat_map(lambda e: [e] * int(e["id"] % 3)).batch(4),
    "pack": lambda ds: (
        ds.map(lambda e: {"tokens": np.arange(1 + e["id"] % 9)}).pack({"tokens": 16}).batch(2)
    ),
    "mix": lambda ds: tpufeed.Dataset.mix(
        [ds.shuffle(1), ds.filter(lambda e: e["id"] % 2)], weights=[2, 1], seed=4, on_end="stop"
    ).batch(3),
    "mix_pack": lambda ds: (
        tpufeed.Dataset.mix(
            [
                ds.map(lambda e: {"tokens": np.arange(1 + e["id"] % 9)}),
                ds.shuffle(2).map(lambda e: {"tokens": np.arange(1 + e["id"] % 5)}),
            ],
            seed=1,
            on_end="stop",
        )
        .pack({"tokens": 16})
        .batch(2)
    ),
}


def worker_pids():
    return [c.pid for c in worker_processes()]


def segments():
    return glob.glob(f"/dev/shm/tpufeed-{os.getpid()}-*")


def settled(check, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


def leaves(batch):
    return {k: np.asarray(v).tolist() for k, v in batch.items()}


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("prefetch", [0, 3])
def test_set_state_back_and_forth_gives_what_a_fresh_iterator_gives(name, prefetch):
    ds = PIPELINES[name](source()).prefetch(prefetch)
    expected = [leaves(b) for b in ds]
    it = ds.iterator()
    take(it, 3)
    at_three = it.get_state()
    take(it, 4)
    at_seven = it.get_state()
    it.set_state(at_three)  # back: the four batches after it come again
    assert [leaves(b) for b in take(it, 4)] == expected[3:7]
    assert it.get_state() == at_seven
    it.set_state(at_seven)  # forward again, and on to the end
    assert [leaves(b) for b in it] == expected[7:]


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("at", [0, 1, 5])
def test_a_state_taken_right_after_a_restore_is_the_state_restored(name, at):
    ds = PIPELINES[name](source())
    it = ds.iterator()
    take(it, at)
    state = it.get_state()
    expected = [leaves(b) for b in take(it, 3)]
    resumed = ds.iterator(state)
    assert resumed.get_state() == state  # before any item: nothing read yet, nothing lost
    again = ds.iterator(resumed.get_state())
    assert [leaves(b) for b in take(again, 3)] == expected
    it.set_state(state)
    assert it.get_state() == state
    assert [leaves(b) for b in take(it, 3)] == expected


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["batch", "filter"])
def test_set_state_restarts_workers_and_leaves_nothing_behind(name):
    ds = PIPELINES[name](source()).workers(2).prefetch(4)
    expected = [leaves(b) for b in PIPELINES[name](source())]
    it = ds.iterator()
    try:
        take(it, 2)
        state = it.get_state()
        take(it, 5)  # the workers have made more than this, waiting in the prefetch buffer
        assert settled(lambda: len(worker_pids()) == 2)  # forked as the fork server gets to it
        before = set(worker_pids())
        it.set_state(state)
        assert [leaves(b) for b in take(it, 5)] == expected[2:7]  # nothing stale
        assert settled(lambda: not before & set(worker_pids())), "old workers still running"
        assert settled(lambda: len(worker_pids()) == 2)
    finally:
        it.close()  # also when an assertion failed: no worker left for the next test to count
    gc.collect()
    assert settled(lambda: worker_pids() == [] and segments() == [])


def test_a_bad_state_leaves_the_iterator_where_it_was():
    ds = PIPELINES["batch"](source()).prefetch(2)
    expected = ids(ds)
    it = ds.iterator()
    take(it, 2)
    other = source().batch(3).iterator()
    next(other)
    with pytest.raises(StateError, match="fingerprint|another pipeline|does not match"):
        it.set_state(other.get_state())
    with pytest.raises(StateError):
        it.set_state("not json")
    assert ids(it) == expected[2:]


def test_set_state_reopens_a_closed_or_finished_iterator():
    ds = PIPELINES["batch"](source()).prefetch(2)
    expected = ids(ds)
    it = ds.iterator()
    take(it, 4)
    state = it.get_state()
    it.close()
    assert list(it) == []
    it.set_state(state)
    assert ids(it) == expected[4:]  # to the end
    it.set_state(None)  # None: the start
    assert ids(it) == expected


def test_set_state_takes_every_hosts_states_for_another_host_count():
    make = PIPELINES["filter"]
    whole = ids(make(source()).repeat(1))
    runs = [make(source()).repeat(1).shard(h, 2).iterator() for h in range(2)]
    seen = [i for it in runs for i in sum(ids(take(it, 3)), [])]
    states = [it.get_state() for it in runs]
    rest = []
    for h in range(3):
        it = make(source()).repeat(1).shard(h, 3).iterator()
        next(it)
        it.set_state(states)
        rest += sum(ids(it), [])
    assert sorted(seen + rest) == sorted(sum(whole, []))  # the epoch exactly once


def test_set_state_with_hosts_ending_together():
    ds = source(40).filter(lambda e: e["id"] % 5 != 0)  # host 0 keeps fewer
    hosts = [
        ds.shard(h, 2).batch(4).iterator(uneven="pad", agreement=a)
        for h, a in enumerate(ThreadAgreement.group(2))
    ]
    import threading

    out = [None, None]

    def run(h):
        it = hosts[h]
        take(it, 2)
        state = it.get_state()
        first = ids(it)
        it.set_state(state)  # both hosts at the same step, as the docs ask
        out[h] = (first, ids(it))

    threads = [threading.Thread(target=run, args=(h,)) for h in range(2)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    for first, again in out:
        assert again == first and len(first) > 0


def test_log_every_s_logs_a_progress_line(caplog):
    def consume(ds):
        got = []
        for x in ds:  # a consumer that takes about 0.3 s
            time.sleep(0.01)
            got.append(x)
        return got

    ds = tpufeed.Dataset.from_sequence(list(range(30))).map(lambda x: x + 1)
    with caplog.at_level(logging.INFO, logger="tpufeed"):
        assert consume(ds.options(log_every_s=0.05)) == list(range(1, 31))
    lines = [r.getMessage() for r in caplog.records if r.name == "tpufeed"]
    assert len(lines) >= 2
    assert all("records/s, consumer waited" in line and "bottleneck" in line for line in lines)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tpufeed"):
        consume(ds)  # off by default
    assert not [r for r in caplog.records if r.name == "tpufeed"]


@pytest.mark.parametrize("bad", [0, -1.0, "60", True])
def test_log_every_s_must_be_a_positive_number(bad):
    with pytest.raises(tpufeed.InvalidArgumentError, match="log_every_s"):
        tpufeed.Dataset.from_sequence([1]).options(log_every_s=bad)


# -- options(trace=path): the iterator's timeline, written as it ends ---------------------------


def trace_names(path):
    from tests.observe.trace_events import read_trace

    return [e["name"] for e in read_trace(path)["traceEvents"] if e["ph"] != "M"]


@pytest.mark.parametrize("name", ["batch", "pack", "mix"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_traced_iterator_writes_its_file_at_the_end(tmp_path, name, prefetch):
    path = tmp_path / "run.json"
    it = PIPELINES[name](source()).prefetch(prefetch).options(trace=path).iterator()
    items = sum(1 for _ in it)
    names = trace_names(path)  # written when the end was reached, without a close
    assert names.count("next") == items + 1
    assert name in names  # the stream stage's spans
    assert timeline.recording() is None


def test_a_traced_iterator_writes_on_close_and_again_longer_after_set_state(tmp_path):
    path = tmp_path / "run.json"
    it = PIPELINES["batch"](source()).options(trace=path).iterator()
    take(it, 3)
    state = it.get_state()
    it.close()
    assert trace_names(path).count("next") == 3
    it.set_state(state)
    take(it, 2)
    it.set_state(state)  # closes the run: the file now holds both runs
    assert trace_names(path).count("next") == 5
    it.close()


def test_a_traced_iterator_writes_its_file_when_it_fails(tmp_path):
    path = tmp_path / "run.json"
    ds = source().map(lambda e: e if e["id"] != 99 else 1 // 0).batch(4).options(trace=path)
    it = ds.iterator()
    made = []
    with pytest.raises(tpufeed.TransformError):
        made.extend(it)
    assert trace_names(path).count("next") == len(made) + 1  # the batches, and the failure


@pytest.mark.multiprocess
def test_a_traced_iterator_records_its_workers(tmp_path):
    from tests.observe.trace_events import names_of_processes, read_trace

    path = tmp_path / "run.json"
    ds = PIPELINES["filter"](source()).workers(2, isolate=True).options(trace=path)
    with ds.iterator() as it:
        assert sum(1 for _ in it)
    names = names_of_processes(read_trace(path))
    assert sorted(names.values()) == ["tpufeed consumer", "tpufeed worker 0", "tpufeed worker 1"]


@pytest.mark.multiprocess
def test_a_worker_that_got_no_chunk_still_has_its_track(tmp_path):
    """One chunk for two workers: the idle one shows too (named by the parent as the pool
    starts), so a trace never hides a worker, and a loaded machine cannot drop a name."""
    from tests.observe.trace_events import names_of_processes, read_trace

    path = tmp_path / "run.json"
    ds = tpufeed.Dataset.from_sequence(list(range(4))).batch(4).workers(2, isolate=True)
    with ds.options(trace=path).iterator() as it:
        assert len(list(it)) == 1
    names = names_of_processes(read_trace(path))
    assert sorted(names.values()) == ["tpufeed consumer", "tpufeed worker 0", "tpufeed worker 1"]


@pytest.mark.parametrize("trace", [7, b"run.json", "", ["run.json"]])
def test_a_trace_that_is_not_a_path_is_named(trace):
    with pytest.raises(tpufeed.InvalidArgumentError, match=r"options\(trace=\.\.\.\).*got"):
        source().options(trace=trace)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_left_open_by_a_torch_script_closes_quietly_at_exit(tmp_path, workers):
    """Closed by its `__del__` while modules were torn down, it found tpufeed's functions
    gone: "Exception ignored in DatasetIterator.__del__ ... TypeError" after the script. An
    open iterator is closed at exit, before that (its trace written too)."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    import textwrap

    trace = tmp_path / "run.json"
    script = textwrap.dedent(f"""
        import torch
        import tpufeed
        ds = tpufeed.Dataset.from_sequence(list(range(100))).batch(4).workers({workers})
        it = iter(ds.options(trace={str(trace)!r}))
        print(next(it).tolist())
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.split("\n")[0] == "[0, 1, 2, 3]", proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert trace.stat().st_size > 0
