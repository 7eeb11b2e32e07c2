"""`workers(n, init=fn)`: each real worker process calls fn(worker_index, worker_count) once,
before its first element, as Grain's `worker_init_fn`; the calling process calls fn(-1, n) once
where it makes elements itself (every one with `workers(0)`); workers started anew (a restore
after a worker was killed) call it again; a failing fn is a WorkerError naming it, never a
hang, and leaves no worker or segment behind."""

import os
import signal
import time

import pytest

import tpufeed
from tests.processes import wait_for_workers
from tpufeed.errors import InvalidArgumentError, WorkerError

pytestmark = pytest.mark.multiprocess


class Recorder:
    """An init function that notes each call (index, count, pid) in a file of its own."""

    def __init__(self, folder, fail_at=None):
        self.path = os.path.join(str(folder), "calls")
        self.fail_at = fail_at

    def __call__(self, index, count):
        with open(self.path, "a") as f:
            f.write(f"{index} {count} {os.getpid()}\n")
        if index == self.fail_at:
            raise RuntimeError(f"no setup for worker {index}")

    def calls(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path) as f:
            return [tuple(int(v) for v in line.split()) for line in f]


def pid_of(_):
    return os.getpid()


def slowly(x):
    time.sleep(0.05)  # enough work for every worker to start and take some
    return (x, os.getpid())


def numbers(n=64):
    return tpufeed.Dataset.source(list(range(n)))


@pytest.mark.timeout(60)
def test_each_worker_calls_it_once_with_its_index_and_count(tmp_path, nothing_left_behind):
    init = Recorder(tmp_path)
    ds = numbers().map(slowly).batch(4)
    with ds.workers(3, isolate=True, init=init).iterator() as it:
        items = list(it)
    calls = init.calls()
    assert sorted((index, count) for index, count, _ in calls) == [(0, 3), (1, 3), (2, 3)]
    pids = {pid for _, _, pid in calls}
    assert len(pids) == 3 and os.getpid() not in pids  # three processes, none this one
    makers = {int(pid) for batch in items for pid in batch[:, 1]}
    assert makers <= pids  # every element was made by a worker that had called it
    assert [b[:, 0].tolist() for b in items] == [list(range(i, i + 4)) for i in range(0, 64, 4)]


@pytest.mark.timeout(60)
def test_the_calling_process_calls_it_once_where_it_makes_elements(tmp_path):
    init = Recorder(tmp_path)
    ds = numbers(10).map(lambda x: x + 1).workers(0, init=init)
    assert list(ds) == list(range(1, 11))
    assert list(ds) == list(range(1, 11))  # a second iterator: not called again
    assert init.calls() == [(-1, 0, os.getpid())]
    (tmp_path / "workers").mkdir()
    init = Recorder(tmp_path / "workers")
    batches = list(numbers(300).map(pid_of).batch(10).workers(2, init=init))
    here = [c for c in init.calls() if c[0] == -1]
    if os.getpid() in {int(b[0]) for b in batches}:  # it made chunks while workers started
        assert here == [(-1, 2, os.getpid())]
    else:
        assert here == []
    # workers still starting when the run ended may not have got that far
    assert {c[:2] for c in init.calls() if c[0] >= 0} <= {(0, 2), (1, 2)}


def tagged(x):
    time.sleep(0.005)  # enough work for both workers to start and take some
    return (x, os.getpid())


@pytest.mark.timeout(120)
def test_workers_started_anew_after_a_kill_call_it_again(tmp_path, nothing_left_behind):
    init = Recorder(tmp_path)
    ds = numbers(800).map(tagged).batch(8).workers(2, isolate=True, init=init)
    it = ds.iterator()
    got, makers = [], set()
    while len(makers) < 2:  # until both workers have made batches
        got.append(next(it))
        makers.add(int(got[-1][0, 1]))
    state = it.get_state()
    first = init.calls()
    assert sorted(c[:2] for c in first) == [(0, 2), (1, 2)]
    assert {c[2] for c in first} == makers
    victim = next(w for w in wait_for_workers(2) if w.pid in makers)
    victim.send_signal(signal.SIGKILL)
    with pytest.raises(WorkerError, match="killed by signal 9"):
        for _ in it:
            pass
    it.close()
    with ds.iterator(state) as again:
        rest = list(again)
    later = init.calls()[len(first) :]
    assert sorted(c[:2] for c in later) == [(0, 2), (1, 2)]  # called again
    assert not makers & {c[2] for c in later}  # by the new processes
    assert {int(b[0, 1]) for b in rest} <= {c[2] for c in later}
    values = [b[:, 0].tolist() for b in got + rest]  # the rest exactly: none lost or repeated
    assert values == [list(range(i, i + 8)) for i in range(0, 800, 8)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("isolate", [True, False])
def test_a_failing_init_in_a_worker_is_a_named_worker_error(tmp_path, isolate, nothing_left_behind):
    init = Recorder(tmp_path, fail_at=1)
    ds = numbers(2000).map(tagged).batch(10).workers(2, isolate=isolate, init=init)
    with pytest.raises(WorkerError) as caught:
        with ds.iterator() as it:
            for _ in it:
                pass
    message = str(caught.value)
    assert "workers(init=Recorder) raised RuntimeError: no setup for worker 1" in message
    assert "worker 1 of 2" in message and "in tpufeed worker 1" in message
    assert "Traceback" in message


@pytest.mark.timeout(60)
def test_a_failing_init_in_the_calling_process_is_a_named_worker_error(tmp_path):
    init = Recorder(tmp_path, fail_at=-1)
    with pytest.raises(WorkerError, match=r"raised RuntimeError.*the calling process \(index -1\)"):
        list(numbers(10).workers(0, init=init))


def test_refused_where_it_cannot_be_called():
    with pytest.raises(InvalidArgumentError, match="function of \\(worker_index, worker_count\\)"):
        numbers().workers(2, init="setup")
    mixed = tpufeed.Dataset.mix([numbers(), numbers()])
    with pytest.raises(InvalidArgumentError, match="component"):
        mixed.workers(2, init=print)
    with pytest.raises(InvalidArgumentError, match="not run for a mixture's components"):
        list(tpufeed.Dataset.mix([numbers().workers(1, init=print), numbers()]))
