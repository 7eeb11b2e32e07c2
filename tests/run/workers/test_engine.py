"""The worker engine: identical output and exact resume for any worker count, errors that name
their record, and the parent running chunks itself rather than wait."""

import os
import threading
import time

import numpy as np
import pytest

import tpufeed
from tests.processes import wait_for_workers
from tpufeed.errors import TransformError

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]


def augment(element, rng):
    return {"x": element["x"] + rng.integers(0, 100, size=element["x"].shape), "id": element["id"]}


PIPELINES = {
    "batch": lambda ds: ds.random_map(augment).batch(7),
    "drop": lambda ds: ds.random_map(augment).batch(7, drop_remainder=True),
    "filter": lambda ds: ds.filter(lambda e: e["id"] % 3 != 1).random_map(augment).batch(5),
    "filter-drop": lambda ds: ds.filter(lambda e: e["id"] % 4 == 0).batch(3, drop_remainder=True),
    "after-batch": lambda ds: ds.batch(6).map(lambda b: {**b, "sum": b["x"].sum(axis=1)}),
    "unbatched": lambda ds: ds.random_map(augment),
    "strings": lambda ds: ds.map(lambda e: {**e, "name": f"r{e['id']}"}).batch(4),
    "flat_map": lambda ds: (
        ds.flat_map(lambda e: [e] * int(e["id"] % 3)).random_map(augment).batch(5)
    ),
    "flat_map-unbatched": lambda ds: ds.flat_map(lambda e: [e, e] if e["id"] % 2 else []),
    "errors": lambda ds: ds.map(lambda e: e if e["id"] % 9 else 1 / 0).ignore_errors(100).batch(4),
}


def make(pipeline, n=61, epochs=2, hosts=1, host=0):
    ds = (
        tpufeed.Dataset.from_sequence(list(range(n)))
        .shuffle(3)
        .shard(host, hosts)
        .map(lambda i: {"x": np.arange(4) * i, "id": np.int64(i)})
    )
    return PIPELINES[pipeline](ds).repeat(epochs)


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_output_is_identical_for_any_worker_count(pipeline, workers):
    expected = list(make(pipeline))
    same(list(make(pipeline).workers(workers).prefetch(2)), expected)


@pytest.mark.parametrize(
    "pipeline", ["batch", "filter", "unbatched", "flat_map", "flat_map-unbatched"]
)
def test_resume_with_workers_matches_resume_without(pipeline):
    ds = make(pipeline, n=23)
    full = list(ds)
    it = ds.workers(2).iterator()
    for step in range(0, len(full) + 1, 3):
        while len(full) - step < len(list(ds.iterator(it.get_state()))):
            next(it)
        same(list(ds.workers(2).iterator(it.get_state())), full[step:])
    it.close()


def test_state_describes_what_the_consumer_received_not_what_workers_made():
    ds = make("batch", n=200, epochs=1).workers(2).prefetch(8)
    it = ds.iterator()
    next(it)
    time.sleep(0.3)  # workers run ahead
    assert it.get_state()["consumed"] == 7
    it.close()


def test_hosts_with_workers_still_exactly_once():
    seen = []
    for host in range(3):
        for batch in make("batch", epochs=1, hosts=3, host=host).workers(2):
            seen += batch["id"].tolist()
    assert sorted(seen) == list(range(61))


def test_a_closure_over_local_state_runs_in_workers():
    offset = np.int64(1000)
    ds = tpufeed.Dataset.from_sequence(list(range(10))).map(lambda i: i + offset).batch(5)
    assert [b.tolist() for b in ds.workers(2)] == [
        [1000, 1001, 1002, 1003, 1004],
        list(range(1005, 1010)),
    ]


def boom(element):
    if element["id"] == 13:
        raise ValueError("bad pixel")
    return element


def test_a_user_error_names_the_record_and_carries_the_worker_traceback(tmp_path):
    from tpufeed.sources.array_record import write_array_records

    path = str(tmp_path / "data.array_record")
    write_array_records(path, (tpufeed.codec.encode({"id": i}) for i in range(40)))
    ds = (
        tpufeed.Dataset.from_array_record(path)
        .map(tpufeed.codec.decode)
        .map(boom)
        .batch(4)
        .workers(2)
    )
    with pytest.raises(TransformError) as info:
        list(ds)
    message = str(info.value)
    assert "bad pixel" in message and "ValueError" in message
    assert info.value.record == 13 and info.value.path == path
    assert "data.array_record record 13" in message
    assert "in boom" in message


def test_an_error_in_a_worker_comes_back_with_its_traceback_and_record():
    parent = os.getpid()

    def fails_in_workers(element):
        if os.getpid() != parent:
            raise ValueError("only workers fail")
        return element

    ds = tpufeed.Dataset.from_sequence(list(range(10**5))).map(fails_in_workers).batch(8).workers(2)
    with pytest.raises(TransformError) as info:
        list(ds)
    message = str(info.value)
    assert "only workers fail" in message and "in tpufeed worker" in message
    assert "in fails_in_workers" in info.value.traceback_text
    assert f"record {info.value.record}" in message


def test_an_unstackable_batch_in_a_worker_names_the_records():
    ds = (
        tpufeed.Dataset.from_sequence(list(range(10)))
        .map(lambda i: np.zeros(1 + (i == 6)))
        .batch(10)
    )
    with pytest.raises(tpufeed.BatchError, match=r"shape \(1,\).*record 6.*shape \(2,\)"):
        list(ds.workers(2))


def slow_square(i):
    time.sleep(0.002)
    return np.int64(i) ** 2


def test_an_iterator_made_in_a_thread_that_exits_keeps_its_workers():
    """Training frameworks make iterators in helper threads; the workers outlive that thread."""
    import threading

    ds = tpufeed.Dataset.from_sequence(list(range(3000))).map(slow_square).batch(10)
    made = {}

    def make_and_start():
        it = made["it"] = ds.workers(2).iterator()
        made["first"] = [next(it)]
        while "transfer" not in it.stats().stages:  # until workers answer
            made["first"].append(next(it))
        time.sleep(1.0)  # every worker is past its start-up

    thread = threading.Thread(target=make_and_start)
    thread.start()
    thread.join()
    time.sleep(0.5)  # time for a signal sent at the thread's exit to arrive
    got = [*made["first"], *made["it"]]
    assert len(made["first"]) < 250  # the workers took part, with batches to go
    assert np.array_equal(np.concatenate(got), np.arange(3000) ** 2)
    made["it"].close()


def _where(e):
    time.sleep(0.002)
    return {"id": e, "pid": os.getpid()}


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the parent steals only with a core of its own"
)
def test_the_parent_runs_chunks_itself_rather_than_wait_and_order_holds():
    ds = tpufeed.Dataset.from_sequence(list(range(800))).shuffle(1).map(_where).batch(8)
    expected = [b["id"].tolist() for b in ds]
    got = list(ds.workers(1))
    assert [b["id"].tolist() for b in got] == expected
    makers = {int(b["pid"][0]) for b in got[10:]}
    assert os.getpid() in makers and len(makers) == 2  # the worker, and the parent in its waits


def _cold_first(e):
    """1 ms a record, and a second more on the first call in a worker (its first task is cold)."""
    if os.getpid() != int(os.environ["TPUFEED_TEST_PARENT"]) and not _COLD["warm"]:
        time.sleep(1.0)
        _COLD["warm"] = True
    time.sleep(0.001)
    return {"id": e, "pid": os.getpid()}


_COLD = {"warm": False}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) > 4, reason="one worker per core")
def test_the_parent_makes_batches_while_workers_without_a_spare_core_are_cold(monkeypatch):
    """With a worker on every core the parent steals no work from warm workers, but while they
    are still cold (their first task opens files, warms caches) it runs chunks itself rather
    than wait: batches it made come after the first batch a worker made."""
    monkeypatch.setenv("TPUFEED_TEST_PARENT", str(os.getpid()))
    workers = len(os.sched_getaffinity(0))
    ds = tpufeed.Dataset.from_sequence(list(range(2000))).map(_cold_first).batch(8)
    got = list(ds.workers(workers))
    assert [int(i) for b in got for i in b["id"]] == list(range(2000))
    makers = [int(b["pid"][0]) for b in got]
    first_from_a_worker = next(k for k, pid in enumerate(makers) if pid != os.getpid())
    assert os.getpid() in makers[first_from_a_worker:]


def _fails_at_300(e):
    time.sleep(0.001)
    if e == 300:
        raise ValueError("bad record")
    return e


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the parent steals only with a core of its own"
)
def test_an_error_in_a_chunk_the_parent_ran_ahead_comes_in_order():
    ds = tpufeed.Dataset.from_sequence(list(range(800))).map(_fails_at_300).batch(10).workers(1)
    got = []
    with pytest.raises(TransformError) as info:
        for batch in ds:
            got.append(batch.tolist())
    assert got == [list(range(i, i + 10)) for i in range(0, 300, 10)]
    assert info.value.record == 300


def _counted(path):
    def fn(e):
        with open(path, "a") as f:
            f.write("x\n")
        return e

    return fn


def test_auto_hands_its_warm_up_on_instead_of_making_it_twice(tmp_path):
    calls = tmp_path / "calls"
    ds = (
        tpufeed.Dataset.from_sequence(list(range(3000)))
        .shuffle(2)
        .map(_counted(str(calls)))
        .batch(16)
    )
    expected = [b.tolist() for b in ds]
    calls.unlink()
    got = [b.tolist() for b in ds.workers("auto").prefetch("auto")]
    assert got == expected
    assert calls.read_text().count("x") == 3000  # each record transformed once


def test_workers_start_when_the_iterator_is_made_not_at_the_first_item():
    """They boot while the caller builds and compiles its model, before it asks for a batch."""
    it = iter(tpufeed.Dataset.from_sequence(list(range(64))).batch(8).workers(2))
    try:
        assert len(wait_for_workers(2)) == 2  # nothing asked for yet
        assert next(it).tolist() == list(range(8))
    finally:
        it.close()


def _where_thread(e):
    time.sleep(0.002)
    return {"id": np.int64(e), "pid": os.getpid(), "thread": threading.get_ident()}


_where_thread.thread_safe = True


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one thread a core")
def test_the_parent_makes_its_first_batch_on_the_cold_workers_cores():
    ds = (
        tpufeed.Dataset.from_sequence(list(range(256)))
        .map(_where_thread)
        .map(lambda e: {**e, "id": e["id"] * 1})
        .batch(32)
    )
    expected = [b["id"].tolist() for b in ds]
    it = ds.workers(2).iterator()
    try:
        got = list(it)
    finally:
        it.close()
    assert [b["id"].tolist() for b in got] == expected
    first = got[0]
    assert set(first["pid"].tolist()) == {os.getpid()}  # made here, while the workers started
    assert len(set(first["thread"].tolist())) == 2
    assert {int(b["pid"][0]) for b in got} - {os.getpid()}  # and the workers made others
