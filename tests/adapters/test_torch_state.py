"""`to_torch` state: get_state/set_state on the iterable and its iterators, and torchdata's
StatefulDataLoader round-tripping exactly with and without DataLoader workers."""

from __future__ import annotations

import functools
import gc
import json
import time

import numpy as np
import psutil
import pytest

import tpufeed
from tests.processes import is_fork_server
from tpufeed.errors import StateError

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torch.utils.data import DataLoader  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

N, BATCH = 45, 4  # 12 batches an epoch (the last one short); 8 after the filter


def to_element(r):
    return {"id": np.int64(r), "x": np.full((2,), r, np.float32)}


PIPELINES = {  # "fixed": every batch cut from 4 records; "filter": the data decides the counts
    "fixed": lambda ds: ds.map(to_element).batch(BATCH),
    "filter": lambda ds: ds.map(to_element).filter(lambda e: e["id"] % 3 != 1).batch(BATCH),
}


def make(kind="fixed", epochs=2, host=0, hosts=1):
    ds = tpufeed.Dataset.from_sequence(list(range(N))).shuffle(2).shard(host, hosts)
    return PIPELINES[kind](ds).repeat(epochs)


def ids(batches):
    return [b["id"].tolist() for b in batches]


def children():
    """This process's live descendants (DataLoader workers, tpufeed workers)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and not is_fork_server(child):
                found.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture
def no_leaked_processes():
    before = children()
    yield
    gc.collect()
    deadline = time.monotonic() + 10
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children() - before == set()


def loader(data, num_workers, every=1):
    return StatefulDataLoader(
        data,
        batch_size=None,
        num_workers=num_workers,
        snapshot_every_n_steps=every,
        multiprocessing_context="fork" if num_workers else None,
    )


def stop_and_resume(kind, num_workers, stop, every=1):
    """Batches before `stop` from one loader, then the rest from a new loader restored from
    the first one's state_dict (sent through JSON, as a checkpoint file would)."""
    first = loader(make(kind).to_torch(), num_workers, every)
    it = iter(first)
    head = ids(next(it) for _ in range(stop))
    saved = json.loads(json.dumps(first.state_dict()))
    del it, first
    second = loader(make(kind).to_torch(), num_workers, every)
    second.load_state_dict(saved)
    return head + ids(second)


STOPS = [("fixed", stop) for stop in (0, 1, 5, 11, 12, 13, 23, 24)] + [
    ("filter", stop) for stop in (0, 1, 7, 8, 9, 15, 16)
]  # epoch 2 starts at 12 and 8


@pytest.mark.parametrize("kind,stop", STOPS)
def test_stateful_dataloader_resumes_exactly_without_workers(kind, stop, no_leaked_processes):
    assert stop_and_resume(kind, 0, stop) == ids(make(kind))


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    "kind,stop",
    [
        ("fixed", 0),
        ("fixed", 5),
        ("fixed", 12),
        ("fixed", 13),
        ("fixed", 23),
        ("filter", 1),
        ("filter", 8),
        ("filter", 15),
    ],
)
def test_stateful_dataloader_resumes_exactly_with_2_workers(kind, stop, no_leaked_processes):
    """Workers run ahead (prefetch_factor 2 each); the state is what the loop received."""
    assert stop_and_resume(kind, 2, stop) == uninterrupted(kind, 2)


@functools.cache
def uninterrupted(kind, num_workers):
    return ids(loader(make(kind).to_torch(), num_workers))


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_with_workers_the_loop_receives_the_batches_of_num_workers_0_where_batches_are_fixed():
    assert uninterrupted("fixed", 2) == ids(make("fixed"))
    assert uninterrupted("filter", 2) != ids(make("filter"))  # each worker filters its share


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_snapshots_every_n_steps_resume_exactly(num_workers, no_leaked_processes):
    expected = ids(make())
    for stop in (4, 13):  # between two snapshots: the loader replays from the last one
        assert stop_and_resume("fixed", num_workers, stop, every=3) == expected


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("num_workers", [2, 3])
def test_a_plain_state_continues_under_any_num_workers(num_workers, no_leaked_processes):
    """A state of the one-process stream, given to set_state, is where the workers start."""
    expected = ids(make())
    it = iter(make().to_torch())
    head = ids(next(it) for _ in range(7))
    data = make().to_torch()
    data.set_state(it.get_state())
    assert head + ids(DataLoader(data, batch_size=None, num_workers=num_workers)) == expected


@pytest.mark.multiprocess
@pytest.mark.parametrize("stop", [13])
def test_set_state_on_a_live_iterator_with_tpufeed_workers_delivers_nothing_stale(
    stop, no_leaked_processes
):
    expected = ids(make())
    it = iter(make().workers(2).prefetch(3).to_torch())
    head = ids(next(it) for _ in range(stop))
    saved = it.get_state()
    ids(next(it) for _ in range(4))  # the workers and prefetch run on ahead
    it.set_state(saved)
    assert head + ids(it) == expected
    it.close()


def test_a_bad_state_leaves_the_iterator_where_it_was():
    expected = ids(make())
    it = iter(make().to_torch())
    head = ids(next(it) for _ in range(3))
    for bad in ({"version": 2}, make(epochs=1).map(lambda b: b).to_torch().get_state(), [], "x"):
        with pytest.raises(StateError):
            it.set_state(bad)
    assert head + ids(it) == expected


def test_the_iterable_and_its_iterators_share_one_protocol():
    data = make().to_torch()
    start = data.get_state()
    assert data.state_dict() == start and start == make().iterator().get_state()
    it = iter(data)
    batches = ids(next(it) for _ in range(5))
    assert data.get_state() == it.get_state() == it.state_dict()
    data.set_state(start)  # the next pass starts there; this one goes on
    assert ids(next(it) for _ in range(1)) == ids(make())[5:6]
    assert ids(data)[:5] == batches
    it.load_state_dict(start)
    assert ids(next(it) for _ in range(5)) == batches


def test_every_hosts_state_continues_on_another_host_count():
    """set_state takes the list of every host's state, as Dataset.iterator does."""
    expected = sorted(i for b in ids(make()) for i in b)
    iters = [iter(make(host=h, hosts=2).to_torch()) for h in range(2)]
    head = [i for it in iters for b in ids(next(it) for _ in range(3)) for i in b]
    data = make().to_torch()
    data.set_state([it.get_state() for it in iters])
    assert sorted(head + [i for b in ids(data) for i in b]) == expected


def test_a_worker_state_names_the_worker_outside_it():
    state = {"dataloader_worker": [1, 2], "skip": 1, "state": make().to_torch().get_state()}
    with pytest.raises(StateError, match=r"worker \[1, 2\]"):
        make().to_torch().load_state_dict(state)
