"""`it.start()`: the first batch made before the first `next()` (the model restores meanwhile),
as Grain's `start_prefetch`: idempotent, exact, and resumable at once."""

import os
import threading
import time

import numpy as np
import pytest

from tests.processes import worker_processes
from tests.run.test_iterator import PIPELINES, ids, source, take
from tpufeed.errors import TransformError

WAIT_S = 60  # a bound on waiting for work that has begun, never a timing


def seen(folder):
    """A transform that leaves a file per record it made, whichever process runs it."""

    def mark(e):
        (folder / f"{int(e['id'])}.{os.getpid()}").touch()
        return e

    return mark


def made(folder):
    """Records made so far as (record, pid) pairs, once one is made, within WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not any(folder.iterdir()):
        assert time.monotonic() < deadline, "start() made nothing"
        time.sleep(0.01)
    return {tuple(int(p) for p in path.name.split(".")) for path in folder.iterdir()}


def contents(items):
    return [{k: np.asarray(v).tolist() for k, v in item.items()} for item in items]


def settings(ds, workers, prefetch):
    return ds.workers(workers).prefetch(prefetch) if workers else ds.prefetch(prefetch)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_start_makes_the_first_batch_before_next(tmp_path, workers):
    ds = settings(source().map(seen(tmp_path)).batch(4), workers, 0)
    with ds.iterator() as it:
        state = it.get_state()
        it.start()
        records = made(tmp_path)  # before any next(): nothing else could have made them
        assert records and {r for r, _ in records} <= set(range(120))
        assert it.get_state() == state  # nothing was handed out
        assert ids(take(it, 2)) == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize(
    ("workers", "prefetch"),
    [
        (0, 0),
        (0, 2),
        pytest.param(2, 1, marks=pytest.mark.multiprocess),
        pytest.param(2, 3, marks=pytest.mark.multiprocess),
    ],
)
def test_start_is_exact_and_resumable_at_every_restore(name, workers, prefetch):
    """From a state taken after 3 items: start() (twice: idempotent) changes nothing of what
    follows, and the state right after it is the restored one."""
    ds = settings(PIPELINES[name](source(60)), workers, prefetch)
    with ds.iterator() as it:
        take(it, 3)
        state = it.get_state()
        expected = contents(it)
    with ds.iterator(state) as it:
        it.start()
        it.start()
        assert it.get_state() == state
        assert contents(it) == expected
    with ds.iterator() as it:  # set_state, then start again
        take(it, 1)
        it.set_state(state)
        it.start()
        assert it.get_state() == state
        assert contents(take(it, 2)) == expected[:2]


def test_start_after_next_or_close_does_nothing():
    with source(20).batch(4).iterator() as it:
        first = ids(take(it, 1))
        it.start()
        assert ids(it) == [list(range(i, i + 4)) for i in range(4, 20, 4)] and first
    it = source(20).batch(4).iterator()
    it.close()
    it.start()
    assert not list(it)


def test_an_error_in_the_first_batch_is_raised_by_next_naming_the_record():
    def boom(e):
        if e["id"] == 2:
            raise ValueError("bad record")
        return e

    it = source(20).map(boom).batch(4).iterator()
    it.start()
    with pytest.raises(TransformError, match="bad record") as caught:
        next(it)
    assert caught.value.record == 2
    assert not list(it)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_close_right_after_start_leaves_no_thread_or_worker(workers):
    def slow(e):
        time.sleep(0.05)
        return e

    it = settings(source(40).map(slow).batch(4), workers, 0).iterator()
    it.start()
    it.close()
    deadline = time.monotonic() + WAIT_S
    while any(t.name == "tpufeed start" for t in threading.enumerate()) or (
        workers and worker_processes()
    ):
        assert time.monotonic() < deadline, "start()'s thread or workers outlived close()"
        time.sleep(0.05)


def test_start_under_uneven_hosts_delegates_to_the_run():
    """`uneven="pad"` wraps the run (tpufeed.run.hosts.uneven): start() reaches it."""
    ds = source(22).batch(4)
    with ds.iterator(uneven="pad") as it:
        it.start()
        batches = list(it)
    assert [b["mask"].tolist() for b in batches][-1] == [True, True, False, False]
    assert [int(i) for b in batches for i, m in zip(b["id"], b["mask"]) if m] == list(range(22))


def test_to_torch_iterator_start():
    data = source(20).batch(4).to_torch()
    it = iter(data)
    next(it)
    state = it.get_state()
    data.set_state(state)
    it = iter(data)
    it.start()
    assert it.get_state() == state
    assert [b["id"].tolist() for b in it] == [list(range(i, i + 4)) for i in range(4, 20, 4)]


def test_to_jax_start_without_prefetch(tmp_path):
    ds = source(20).map(seen(tmp_path)).batch(4)
    it = ds.to_jax(prefetch=0)
    it.start()
    assert made(tmp_path)
    assert [np.asarray(b["id"]).tolist() for b in it] == [
        list(range(i, i + 4)) for i in range(0, 20, 4)
    ]
