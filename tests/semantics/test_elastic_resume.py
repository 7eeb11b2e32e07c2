"""DESIGN.md semantics 5, elastic resume in lockstep: one host's state restores on another host
count with the rest of the epoch exactly once, and the next epoch is whole on the new hosts.
The states of all hosts, for pipelines whose counts depend on the data:
test_elastic_resume_all_hosts.py."""

import pytest

from tests.semantics.numbered import flat, make, records_of


@pytest.mark.parametrize("old_hosts,new_hosts", [(4, 2), (2, 3), (3, 8), (8, 1), (1, 4)])
@pytest.mark.parametrize("steps", [0, 1, 2])
@pytest.mark.parametrize("state_from", [0, -1])
def test_elastic_resume_keeps_exactly_once(old_hosts, new_hosts, steps, state_from):
    n, batch = 64, 3
    before, states = [], []
    for host in range(old_hosts):
        it = make(n=n, hosts=old_hosts, host=host, batch=batch).iterator()
        before += flat(next(it) for _ in range(steps))
        states.append(it.get_state())
    state = states[state_from]
    after = []
    for host in range(new_hosts):
        after += flat(make(n=n, hosts=new_hosts, host=host, batch=batch).iterator(state))
    assert sorted(before + after) == list(range(n))


def test_elastic_resume_then_next_epoch_uses_the_new_hosts():
    n = 40
    it = make(n=n, hosts=4, host=0, batch=2, epochs=2).iterator()
    next(it)
    state = it.get_state()
    second_epoch = []
    for host in range(2):
        resumed = make(n=n, hosts=2, host=host, batch=2, epochs=2).iterator(state)
        for item in resumed:
            if resumed.get_state()["epoch"] == 1:
                second_epoch += records_of(item)
    assert sorted(second_epoch) == list(range(n))


@pytest.mark.parametrize("old_hosts,new_hosts", [(4, 2), (2, 3), (3, 1)])
@pytest.mark.parametrize("cut,kept", [(lambda ds: ds.take(30), 30), (lambda ds: ds.skip(9), 55)])
def test_elastic_resume_of_a_sliced_epoch_keeps_exactly_once(old_hosts, new_hosts, cut, kept):
    n, batch = 64, 3
    make_cut = lambda hosts, host: make(n=n, hosts=hosts, host=host, batch=batch, extra=cut)  # noqa: E731
    before, states = [], []
    for host in range(old_hosts):
        it = make_cut(old_hosts, host).iterator()
        before += flat(next(it) for _ in range(2))
        states.append(it.get_state())
    after = []
    for host in range(new_hosts):
        after += flat(make_cut(new_hosts, host).iterator(states[0]))
    whole = flat(make(n=n, extra=cut).iterator())
    assert len(whole) == kept
    assert sorted(before + after) == sorted(whole)
    assert len(before + after) == len(set(before + after))
