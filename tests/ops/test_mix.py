"""Dataset.mix: exact proportions, each component its own order and epochs, exact resume."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tests.processes import wait_for_workers
from tpufeed.errors import BatchError, InvalidArgumentError, StateError


def component(tag, n, seed=None, keep=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n)))
    if seed is not None:
        ds = ds.shuffle(seed)
    ds = ds.map(lambda i, tag=tag: {"tag": np.int64(tag), "id": np.int64(i)})
    if keep is not None:
        ds = ds.filter(keep)
    return ds


def tags_ids(items):
    return [
        (int(t), int(i))
        for item in items
        for t, i in zip(np.atleast_1d(item["tag"]), np.atleast_1d(item["id"]))
    ]


def test_restart_repeats_a_small_component_with_a_fresh_order_each_epoch():
    small, large = component(0, 5, seed=1), component(1, 1000, seed=2)
    it = tpufeed.Dataset.mix([small, large], weights=[0.5, 0.5], seed=3).iterator()
    got = tags_ids(next(it) for _ in range(200))
    mine = [i for t, i in got if t == 0]
    epochs = [mine[k : k + 5] for k in range(0, 100, 5)]
    assert all(sorted(e) == list(range(5)) for e in epochs)  # each epoch of it exactly once
    assert len({tuple(e) for e in epochs}) > 1  # a fresh permutation each epoch
    theirs = [i for t, i in got if t == 1]
    assert len(set(theirs)) == len(theirs) == 100


def test_stop_ends_the_mixture_and_drop_leaves_the_rest():
    a, b = component(0, 4), component(1, 10)
    stopped = tags_ids(tpufeed.Dataset.mix([a, b], on_end="stop"))
    assert [i for t, i in stopped if t == 0] == [0, 1, 2, 3] and len(stopped) <= 9
    dropped = tags_ids(tpufeed.Dataset.mix([a, b], on_end="drop"))
    assert sorted(dropped) == [(0, i) for i in range(4)] + [(1, i) for i in range(10)]


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_after_mix_stacks_across_components_the_same_with_workers(workers):
    a, b = component(0, 50, seed=1), component(1, 80, seed=2, keep=lambda e: e["id"] % 3)
    ds = tpufeed.Dataset.mix([a, b], weights=[0.4, 0.6], on_end="drop").batch(8)
    expected = [b["id"].tolist() for b in ds]
    assert sum(map(len, expected)) == 50 + 53
    got = [b["id"].tolist() for b in ds.workers(workers).prefetch(2)]
    assert got == expected


def test_components_that_do_not_batch_together_are_named():
    a = tpufeed.Dataset.from_sequence(list(range(10))).map(lambda i: {"x": np.zeros(2)})
    b = tpufeed.Dataset.from_sequence(list(range(10))).map(lambda i: {"x": np.zeros(3)})
    with pytest.raises(BatchError, match=r"components #0 .* and #1 .* do not batch together"):
        list(tpufeed.Dataset.mix([a, b]).batch(4))


def test_the_statistics_give_each_components_share():
    ds = tpufeed.Dataset.mix([component(0, 100), component(1, 100)], weights=[3, 1])
    it = ds.batch(10).iterator()
    for _ in range(10):
        next(it)
    mix = it.stats().mixture
    assert [c["taken"] for c in mix] == [75, 25]
    assert mix[0]["share"] == pytest.approx(0.75) and mix[1]["weight"] == pytest.approx(0.25)
    assert "mixture #0" in it.stats().summary()


def mixed(n_a=23, n_b=31, hosts=1, host=0, batch=3, packed=False, on_end="drop"):
    a = component(0, n_a, seed=1)
    b = component(1, n_b, seed=2, keep=lambda e: e["id"] % 4 != 1)
    ds = tpufeed.Dataset.mix([a, b], weights=[0.3, 0.7], seed=5, on_end=on_end).shard(host, hosts)
    if packed:
        ds = (
            tpufeed.Dataset.mix(
                [a.map(_tokens), b.map(_tokens)], weights=[0.3, 0.7], seed=5, on_end=on_end
            )
            .shard(host, hosts)
            .pack({"tokens": 8}, open_rows=3)
        )
    return ds.batch(batch) if batch else ds


def _tokens(e):
    return {"tokens": np.full(int(e["id"]) % 11 + 1, e["tag"] * 1000 + e["id"], np.int64)}


def content(item, packed):
    if not packed:
        return tags_ids([item])
    out = []
    for row, seg in zip(np.atleast_2d(item["tokens"]), np.atleast_2d(item["tokens_segment_ids"])):
        out += [int(t) for t in row[seg > 0]]
    return out


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([None, 1, 4]), st.booleans(), st.integers(0, 12))
def test_resume_at_any_step_continues_exactly(batch, packed, step):
    ds = mixed(batch=batch, packed=packed)
    full = [content(i, packed) for i in ds]
    it = ds.iterator()
    for _ in range(min(step, len(full))):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert len(json.dumps(state)) < 4096
    assert [content(i, packed) for i in ds.iterator(state)] == full[min(step, len(full)) :]


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.lists(st.integers(0, 8), min_size=4, max_size=4),
    st.booleans(),
)
def test_all_hosts_states_restore_exactly_once_per_component(old, new, steps, packed):
    before, states = [], []
    for host in range(old):
        it = mixed(hosts=old, host=host, packed=packed).iterator()
        for _ in range(steps[host]):
            item = next(it, None)
            if item is not None:
                before += content(item, packed)
        states.append(it.get_state())
    after = []
    for host in range(new):
        after += [
            x
            for item in mixed(hosts=new, host=host, packed=packed).iterator(states)
            for x in content(item, packed)
        ]
    everything = [x for item in mixed(packed=packed) for x in content(item, packed)]
    assert sorted(before + after) == sorted(everything)


def test_one_hosts_state_is_refused_on_another_host():
    it = mixed(hosts=2, host=0).iterator()
    next(it)
    with pytest.raises(StateError, match="pass the states of all hosts"):
        mixed(hosts=3, host=0).iterator(it.get_state())


def test_mistakes_are_named():
    a = component(0, 5)
    with pytest.raises(InvalidArgumentError, match="one weight per dataset"):
        tpufeed.Dataset.mix([a, a], weights=[1])
    with pytest.raises(InvalidArgumentError, match="positive numbers"):
        tpufeed.Dataset.mix([a, a], weights=[1, -1])
    with pytest.raises(InvalidArgumentError, match="on_end must be one of"):
        tpufeed.Dataset.mix([a], on_end="loop")
    with pytest.raises(InvalidArgumentError, match="component 1 batches"):
        tpufeed.Dataset.mix([a, a.batch(2)])
    with pytest.raises(InvalidArgumentError, match="component 0 is sharded"):
        tpufeed.Dataset.mix([a.shard(0, 2)])
    with pytest.raises(InvalidArgumentError, match="shuffle belongs to each component"):
        tpufeed.Dataset.mix([a]).shuffle(0)
    with pytest.raises(InvalidArgumentError, match="put per-element stages .* in the components"):
        next(iter(tpufeed.Dataset.mix([a]).map(lambda e: e).batch(2)))


def test_a_component_that_makes_nothing_fails_instead_of_looping_forever():
    empty = component(1, 10, keep=lambda e: False)
    with pytest.raises(tpufeed.TpufeedError, match="component #1 .* made nothing .* loop forever"):
        next(iter(tpufeed.Dataset.mix([component(0, 10), empty])))


@pytest.mark.multiprocess
def test_a_mixture_with_workers_leaves_no_process_behind():
    import psutil

    ds = tpufeed.Dataset.mix([component(0, 2000), component(1, 2000)]).batch(16).workers(2)
    it = ds.iterator()
    try:
        next(it)
        children = wait_for_workers(2)
        assert len(children) == 2  # one worker per component, by weight
    finally:
        it.close()
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive


@pytest.mark.parametrize("bad", [[], "abc", [5], ["{"], 7])
def test_a_malformed_mixture_state_is_a_state_error(bad):
    with pytest.raises(StateError):
        mixed().iterator(bad)
