"""Elastic resume arithmetic: cursors carried on to another host count, without I/O.

The model: position p of an epoch makes `outputs[p]` outputs (0 after a filter, several after a
flat_map). Hosts deliver outputs in stream order and may stop anywhere, even inside a unit. Every
(position, output) pair must be delivered exactly once over any chain of stops and host counts.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpufeed.errors import StateError
from tpufeed.order.cursor import Cursor, epoch_start, host_positions, share_size
from tpufeed.order.elastic import resume_all, resume_one
from tpufeed.order.state import state_from_dict, state_to_dict


def test_resume_on_the_same_hosts_continues_exactly():
    saved = Cursor(epoch=1, base=6, hosts=3, host=2, consumed=5, emitted=2)
    assert resume_one(saved, 100, hosts=3, host=2, counts_depend_on_data=True) == saved


@pytest.mark.parametrize("old_hosts,new_hosts", [(4, 2), (2, 3), (3, 8), (8, 1), (1, 4)])
@pytest.mark.parametrize("n", [50, 97])
@pytest.mark.parametrize("steps", [0, 1, 5, 12])
def test_lockstep_resume_from_one_state_is_exactly_once(old_hosts, new_hosts, n, steps):
    k = min(steps, share_size(n, 0, old_hosts - 1, old_hosts))
    consumed = [p for h in range(old_hosts) for p in host_positions(0, h, old_hosts, 0, k).tolist()]
    saved = Cursor(0, 0, old_hosts, old_hosts - 1, k)
    rest = []
    for host in range(new_hosts):
        c = resume_one(saved, n, new_hosts, host, counts_depend_on_data=False)
        rest.extend(c.positions(n, 0, c.stream_size(n))[0].tolist())
    assert sorted(consumed + rest) == list(range(n))


def test_a_finished_epoch_resumes_into_the_next():
    saved = Cursor(epoch=2, base=0, hosts=2, host=1, consumed=share_size(9, 0, 1, 2))
    cursor = resume_one(saved, 9, hosts=3, host=0, counts_depend_on_data=False)
    assert cursor == Cursor(2, 8, 3, 0, 0)
    assert share_size(9, cursor.base, 2, 3) == 0  # hosts 1 and 2 go straight to epoch 3


def test_one_state_of_a_data_dependent_run_is_refused_on_another_host():
    saved = Cursor(0, 0, 2, 0, 5)
    with pytest.raises(StateError, match="pass the states of all hosts"):
        resume_one(saved, 100, 3, 0, counts_depend_on_data=True)
    with pytest.raises(StateError, match="pass the states of all hosts"):
        resume_one(saved, 100, 2, 1, counts_depend_on_data=True)
    # At the start of a plain segment every host of the run stands at the same place.
    start = resume_one(Cursor(0, 0, 2, 0, 0), 100, 3, 1, counts_depend_on_data=True)
    assert start == Cursor(0, 0, 3, 1, 0)


# -- a model of hosts that stop anywhere ------------------------------------------------------


def stream_outputs(cursor, n, outputs):
    """(position, output) pairs the host still delivers from `cursor`, in order."""
    size = cursor.stream_size(n)
    if size == cursor.consumed:
        return []
    positions, skips = cursor.positions(n, cursor.consumed, size - cursor.consumed)
    pairs = []
    for i, position in enumerate(positions.tolist()):
        skip = int(skips[i]) if skips is not None else 0
        pairs += [(position, j) for j in range(skip, outputs[position])]
    return pairs


def stop_after(cursor, n, outputs, deliveries):
    """The host delivers `deliveries` outputs: (what it delivered, its cursor then)."""
    size = cursor.stream_size(n)
    delivered = []
    if size == cursor.consumed or deliveries == 0:
        return delivered, cursor
    positions, skips = cursor.positions(n, cursor.consumed, size - cursor.consumed)
    for i, position in enumerate(positions.tolist()):
        skip = int(skips[i]) if skips is not None else 0
        for j in range(skip, outputs[position]):
            delivered.append((position, j))
            unit = cursor.consumed + i
            cursor_now = (
                cursor.after(unit + 1) if j + 1 == outputs[position] else cursor.after(unit, j + 1)
            )
            if len(delivered) == deliveries:
                return delivered, cursor_now
    return delivered, cursor.after(size)


@st.composite
def runs(draw):
    n = draw(st.integers(0, 60))
    outputs = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    host_counts = draw(st.lists(st.integers(1, 8), min_size=2, max_size=4))
    fractions = [draw(st.lists(st.floats(0, 1), min_size=h, max_size=h)) for h in host_counts[:-1]]
    return n, outputs, host_counts, fractions


@settings(max_examples=300, deadline=None)
@given(runs())
def test_stops_anywhere_on_any_host_counts_deliver_every_output_exactly_once(run):
    n, outputs, host_counts, fractions = run
    delivered = []
    cursors = [epoch_start(0, host_counts[0], h) for h in range(host_counts[0])]
    for stop in range(len(host_counts) - 1):
        stopped = []
        for cursor, fraction in zip(cursors, fractions[stop]):
            total = len(stream_outputs(cursor, n, outputs))
            got, cursor = stop_after(cursor, n, outputs, int(fraction * total))
            delivered += got
            # What a checkpoint holds survives the trip through JSON.
            stopped.append(state_from_dict(json.loads(json.dumps(state_to_dict(cursor, "f"))), "f"))
        new_hosts = host_counts[stop + 1]
        cursors = [resume_all(stopped, n, new_hosts, h) for h in range(new_hosts)]
    for cursor in cursors:
        delivered += stream_outputs(cursor, n, outputs)
    expected = [(p, j) for p in range(n) for j in range(outputs[p])]
    assert sorted(delivered) == expected


@settings(max_examples=100, deadline=None)
@given(runs())
def test_the_new_hosts_shares_are_balanced(run):
    n, outputs, host_counts, fractions = run
    old = host_counts[0]
    stopped = []
    for h, fraction in zip(range(old), fractions[0]):
        cursor = epoch_start(0, old, h)
        stopped.append(cursor.after(int(fraction * cursor.stream_size(n))))
    new = host_counts[1]
    sizes = [resume_all(stopped, n, new, h).stream_size(n) for h in range(new)]
    assert max(sizes) - min(sizes) <= 1


def test_all_states_on_the_same_host_count_continue_each_host_as_it_was():
    stopped = [Cursor(0, 0, 2, 0, 3), Cursor(0, 0, 2, 1, 5, emitted=1)]
    assert [resume_all(stopped, 40, 2, h) for h in range(2)] == stopped


@pytest.mark.parametrize(
    "states,match",
    [
        ([Cursor(0, 0, 2, 0, 3)], r"missing host\(s\) \[1\]"),
        ([Cursor(0, 0, 2, 0, 3), Cursor(0, 0, 2, 0, 3)], r"\[0\] given more than once"),
        ([Cursor(0, 0, 2, 0, 3), Cursor(1, 0, 2, 1, 3)], "epoch 1 and host 0's in epoch 0"),
        ([Cursor(0, 0, 2, 0, 3), Cursor(0, 0, 3, 1, 3)], "different runs"),
        ([Cursor(0, 0, 2, 0, 3), Cursor(0, 4, 2, 1, 3)], "different stops"),
        ([], "empty list"),
    ],
)
def test_an_incomplete_or_mixed_list_of_states_is_refused(states, match):
    with pytest.raises(StateError, match=match):
        resume_all(states, 40, 3, 0)


def test_a_256_host_list_of_states_stays_well_under_a_megabyte():
    n, hosts = 10**9, 256
    rng = np.random.default_rng(0)
    stopped = [
        Cursor(3, 0, hosts, h, int(c), emitted=1)
        for h, c in enumerate(1_000_000 + rng.integers(0, 5000, hosts))
    ]
    resumed = [resume_all(stopped, n, hosts - 1, h) for h in range(hosts - 1)]
    # The next stop, again out of lockstep, on a run that already has a layer and carries.
    again = [c.after(int(rng.integers(0, 1000)), 1) for c in resumed]
    states = [state_to_dict(c, "0123456789abcdef") for c in again]
    size = len(json.dumps(states))
    assert size < 600_000, size
    layers = [json.loads(s["layers"]) for s in states]
    assert all(len(layer) == 1 and len(layer[0][3]) == hosts for layer in layers)
