"""Elastic resume from every host's state (DESIGN semantics 5), for pipelines whose counts depend
on the data: filters, flat_map and skipped bad records, with and without workers.

H hosts each stop after their own number of items (they are not in lockstep); the list of their
states restores on H' hosts; what the H hosts delivered and what the H' hosts deliver after is
every output of the epoch exactly once.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.errors import StateError


def pieces(e):
    return [{"id": e["id"], "piece": np.int64(k)} for k in range(int(e["id"]) % 3)]


def fails_on_sevens(e):
    if e["id"] % 7 == 3:
        raise ValueError(f"bad record {e['id']}")
    return e


STAGES = {
    "filter": lambda ds: ds.filter(lambda e: e["id"] % 3 != 1).map(
        lambda e: {**e, "piece": np.int64(0)}
    ),
    "flat_map": lambda ds: ds.flat_map(pieces),
    "ignore_errors": lambda ds: (
        ds.map(fails_on_sevens).ignore_errors(10**6).map(lambda e: {**e, "piece": np.int64(0)})
    ),
    "all": lambda ds: (
        ds.filter(lambda e: e["id"] % 5 != 2)
        .map(fails_on_sevens)
        .flat_map(pieces)
        .ignore_errors(10**6)
    ),
}


def expected(n, kind):
    out = []
    for i in range(n):
        if kind in ("filter",) and i % 3 == 1:
            continue
        if kind == "ignore_errors" and i % 7 == 3:
            continue
        if kind == "all" and (i % 5 == 2 or i % 7 == 3):
            continue
        out += [(i, k) for k in range(i % 3)] if kind in ("flat_map", "all") else [(i, 0)]
    return sorted(out)


def make(n, kind, hosts, host, batch, workers, epochs=1):
    ds = (
        tpufeed.Dataset.from_sequence(list(range(n)))
        .shuffle(11)
        .shard(host, hosts)
        .map(lambda i: {"id": np.int64(i)})
    )
    ds = STAGES[kind](ds)
    if batch:
        ds = ds.batch(batch)
    return ds.repeat(epochs).workers(workers)


def pairs(item):
    return list(zip(np.atleast_1d(item["id"]).tolist(), np.atleast_1d(item["piece"]).tolist()))


def stop_and_resume(n, kind, old_hosts, new_hosts, steps, batch, workers):
    before, states = [], []
    for host in range(old_hosts):
        with make(n, kind, old_hosts, host, batch, workers).iterator() as it:
            for _ in range(steps[host]):
                try:
                    before += pairs(next(it))
                except StopIteration:
                    break
            states.append(json.loads(json.dumps(it.get_state())))
    after = []
    for host in range(new_hosts):
        with make(n, kind, new_hosts, host, batch, workers).iterator(states) as it:
            for item in it:
                after += pairs(item)
    return before, after


@st.composite
def stops(draw):
    old_hosts = draw(st.integers(1, 8))
    return (
        draw(st.integers(0, 50)),
        draw(st.sampled_from(sorted(STAGES))),
        old_hosts,
        draw(st.integers(1, 8)),
        draw(st.lists(st.integers(0, 12), min_size=old_hosts, max_size=old_hosts)),
        draw(st.sampled_from([None, 1, 3, 4])),
    )


@settings(max_examples=120, deadline=None)
@given(stops())
def test_all_hosts_states_restore_exactly_once_on_any_host_count(stop):
    n, kind, old_hosts, new_hosts, steps, batch = stop
    before, after = stop_and_resume(n, kind, old_hosts, new_hosts, steps, batch, workers=0)
    assert sorted(before + after) == expected(n, kind)


@pytest.mark.slow
@pytest.mark.multiprocess
@settings(max_examples=6, deadline=None)
@given(stops())
def test_all_hosts_states_restore_exactly_once_with_workers(stop):
    n, kind, old_hosts, new_hosts, steps, batch = stop
    old_hosts, new_hosts, steps = min(old_hosts, 3), min(new_hosts, 3), steps[:3]
    before, after = stop_and_resume(n, kind, old_hosts, new_hosts, steps, batch, workers=2)
    assert sorted(before + after) == expected(n, kind)


@pytest.mark.parametrize("kind", sorted(STAGES))
def test_one_hosts_state_is_refused_on_another_host_count_when_counts_depend_on_data(kind):
    it = make(40, kind, 2, 0, 3, 0).iterator()
    next(it)
    state = it.get_state()
    with pytest.raises(StateError, match=r"pass the states of all hosts.*iterator\(\[state_host0"):
        make(40, kind, 3, 0, 3, 0).iterator(state)
    with pytest.raises(StateError, match="pass the states of all hosts"):
        make(40, kind, 2, 1, 3, 0).iterator(state)
    # On the host that took it, one state is all it needs.
    rest = [pairs(b) for b in make(40, kind, 2, 0, 3, 0).iterator(state)]
    assert rest == [pairs(b) for b in it]


def test_the_same_host_count_continues_every_host_as_if_uninterrupted():
    full = [[pairs(b) for b in make(60, "all", 3, h, 4, 0, epochs=2)] for h in range(3)]
    iterators = [make(60, "all", 3, h, 4, 0, epochs=2).iterator() for h in range(3)]
    for steps, it in zip((2, 5, 3), iterators):
        for _ in range(steps):
            next(it)
    states = [it.get_state() for it in iterators]
    for h, steps in enumerate((2, 5, 3)):
        rest = [pairs(b) for b in make(60, "all", 3, h, 4, 0, epochs=2).iterator(states)]
        assert rest == full[h][steps:]


def test_after_an_elastic_resume_the_next_epoch_is_whole_on_the_new_hosts():
    states = []
    for host, steps in enumerate((1, 4)):
        it = make(50, "filter", 2, host, 3, 0, epochs=2).iterator()
        for _ in range(steps):
            next(it)
        states.append(it.get_state())
    second = []
    for host in range(3):
        it = make(50, "filter", 3, host, 3, 0, epochs=2).iterator(states)
        for item in it:
            if it.get_state()["epoch"] == 1:
                second += pairs(item)
    assert sorted(second) == expected(50, "filter")


def test_states_of_hosts_in_different_epochs_are_refused():
    a = make(20, "filter", 2, 0, 2, 0, epochs=2).iterator()
    b = make(20, "filter", 2, 1, 2, 0, epochs=2).iterator()
    next(a)
    for _ in b:
        if b.get_state()["epoch"] == 1:
            break
    with pytest.raises(StateError, match="epoch 1 and host 0's in epoch 0"):
        make(20, "filter", 3, 0, 2, 0, epochs=2).iterator([a.get_state(), b.get_state()])
