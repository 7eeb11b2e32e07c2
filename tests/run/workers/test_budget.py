"""The shared-memory budget: stated, enforced, a named error for a batch that cannot fit, and
workers that wait when batches together would overrun it."""

import os
import threading
import time

import numpy as np
import psutil
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError, WorkerError
from tpufeed.run.resources import SHM_DIR
from tpufeed.run.workers.budget import shm_budget, shm_free_bytes, worker_share

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]

KB = 1 << 10


class ShmPeak:
    """The most bytes of shared memory one worker's slots held at once (mapped by the worker
    or by this process), sampled every millisecond while in the `with` block.

    A look reads this process's mappings, then the worker's, then this process's again, and
    counts the worker's segments and those this process held at both ends: all of them
    existed together, so the figure is never more than the truth (it may be less).
    `take(items)` waits after each item for a look begun after it arrived, so that a loaded
    machine that starves the sampling thread still has it look while the workers run.
    """

    def __init__(self):
        self.peak = 0
        self._done = threading.Event()
        self._looked = threading.Condition()
        self._looks = 0

    def take(self, items):
        """Each of `items`, then a wait (at most 5 s) for a whole look begun after it came."""
        for item in items:
            with self._looked:
                after = self._looks + 1
                self._looked.wait_for(lambda a=after: self._looks > a, timeout=5)
            yield item

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._done.set()
        self._thread.join()

    def _sample(self):
        me = os.getpid()
        while not self._done.wait(0.001):
            for child in psutil.Process().children(recursive=True):
                before = _segments(me)
                theirs = _segments(child.pid)
                held = {k: v for k, v in _segments(me).items() if k in before}
                for worker in {name.rsplit("-", 1)[0] for name in theirs}:
                    mine = {**held, **theirs}
                    total = sum(v for k, v in mine.items() if k.rsplit("-", 1)[0] == worker)
                    self.peak = max(self.peak, total)
            with self._looked:
                self._looks += 1
                self._looked.notify_all()


def _segments(pid):
    """{segment name: mapped bytes} of the tpufeed batch slots `pid` maps."""
    out = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                if f"{SHM_DIR}/tpufeed-" in line and "beacons" not in line:
                    fields = line.split()
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    out[os.path.basename(fields[5])] = end - start
    except OSError:  # a worker that just exited
        pass
    return out


def _rows(n, width, pause_s=0.0):
    """`n` rows of `width` bytes; `pause_s` per row keeps a run long enough for `ShmPeak` to
    look many times, even on a loaded machine."""

    def row(i):
        time.sleep(pause_s)
        return {"x": np.full(width, i % 256, np.uint8)}

    return tpufeed.Dataset.from_sequence(list(range(n))).map(row)


def test_the_default_budget_is_half_of_the_free_space_of_dev_shm():
    assert abs(shm_budget(None) - shm_free_bytes() // 2) < 64 << 20  # others write there too
    assert shm_budget(123) == 123 and worker_share(1000, 3) == 333
    with pytest.raises(InvalidArgumentError, match="shm_budget_bytes must be a non-negative int"):
        _rows(1, 1).options(shm_budget_bytes=-1)


@pytest.mark.timeout(60)
def test_a_batch_larger_than_a_workers_share_is_named():
    ds = _rows(64, 128 * KB).batch(8).options(shm_budget_bytes=1 << 20).workers(2, isolate=True)
    with pytest.raises(WorkerError) as caught:
        list(ds)
    message = str(caught.value)
    assert "a batch of 1,048,576 bytes" in message
    assert "budget: 1,048,576 bytes over 2 worker(s) is 524,288 bytes each" in message
    assert "options(shm_budget_bytes=...) to at least 2,097,152" in message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("prefetch", [0, 4])
def test_batches_that_together_overrun_the_budget_wait_and_stay_within_it(prefetch):
    """Each worker's share holds one 256 KiB batch, not the sixteen slots' worth it would take
    unbounded; a consumer that keeps every batch gets copies past half a share."""
    budget = 2 * 400 * KB
    ds = _rows(400, 32 * KB, 0.002).batch(8).prefetch(prefetch).options(shm_budget_bytes=budget)
    with ShmPeak() as shm:
        kept = list(shm.take(ds.workers(2, isolate=True)))
    assert 0 < shm.peak <= budget // 2
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(kept, _rows(400, 32 * KB).batch(8)))
    assert len(kept) == 50


def _zeros(n):
    time.sleep(0.002)  # a run long enough for ShmPeak to look many times
    return np.zeros(n, np.uint8)


@pytest.mark.timeout(120)
def test_growing_batches_give_their_old_segments_back_within_the_budget():
    """Every batch is larger than the last: each needs a new segment, which fits only once
    the parent has unmapped the old one and said so."""
    sizes = [8 * KB * (1 + i // 4) for i in range(160)]
    budget = 2 * (sizes[-1] * 8 * 5 // 4 + 4 * KB)
    ds = tpufeed.Dataset.from_sequence(sizes).map(_zeros).batch(4)
    with ShmPeak() as shm:
        got = [
            b.shape for b in shm.take(ds.options(shm_budget_bytes=budget).workers(2, isolate=True))
        ]
    assert got == [(4, n) for n in sizes[::4]]
    assert 0 < shm.peak <= budget // 2


@pytest.mark.timeout(60)
def test_unbatched_elements_larger_than_a_share_come_through_the_pipe():
    ds = _rows(40, 64 * KB).options(shm_budget_bytes=64 * KB).workers(2, isolate=True)
    with ShmPeak() as shm:
        got = [int(e["x"][0]) for e in shm.take(ds)]
    assert got == list(range(40)) and shm.peak == 0


def test_a_worker_of_a_fresh_interpreter_obeys_the_budget_too(monkeypatch):
    monkeypatch.setenv("TPUFEED_FORKSERVER", "0")
    ds = _rows(64, 128 * KB).batch(8).options(shm_budget_bytes=1 << 20).workers(1, isolate=True)
    assert len(list(ds)) == 8  # one worker: its share is the whole budget
    assert os.environ["TPUFEED_FORKSERVER"] == "0"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "workers, schedule",
    [
        # 200 KiB batches lent up to half a share, then 800 KiB ones: they cannot fit beside
        # the lent ones, and the iterator waits for them; they come through the pipe.
        (1, [(50 * KB, 12), (200 * KB, 8)]),
        (2, [(50 * KB, 24), (200 * KB, 16)]),
        # 200 KiB batches lent, then 480 KiB ones: they fit beside the lent ones only without
        # the quarter of headroom a new segment is given.
        (1, [(50 * KB, 12), (120 * KB, 8)]),
    ],
)
def test_growing_batches_that_the_loop_keeps_are_delivered_not_a_hang(workers, schedule):
    """The loop keeps every batch it is lent: they hold up to half of a worker's share, and a
    later, larger batch does not fit beside them while the loop waits for it in next()."""
    sizes = [n for n, count in schedule for _ in range(count)]
    budget = workers * (1 << 20)
    ds = tpufeed.Dataset.from_sequence(sizes).map(_zeros).batch(4)
    with ShmPeak() as shm:
        kept = list(shm.take(ds.options(shm_budget_bytes=budget).workers(workers, isolate=True)))
    assert [b.shape for b in kept] == [(4, n) for n in sizes[::4]]
    assert all(not b.any() for b in kept)
    assert 0 < shm.peak <= budget // workers
