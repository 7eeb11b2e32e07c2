"""Change the data mix mid-run: a state of `mix(weights=a)` resumes into `mix(weights=b)` over the
same components with `allow_new_weights=True`.

Each component continues exactly where it stood (its records before and after the change are
its own order, none lost or repeated), the new weights' schedule starts at the resume point,
on the same or another host count (every host's state), with pack and batch after the mix.
A state whose components, seed or stages after mix differ is still refused, by name.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.errors import InvalidArgumentError, StateError
from tpufeed.order.schedule import next_components, phases

OLD, NEW = (0.8, 0.2), (0.25, 0.75)
SIZES = (37, 53)


def component(tag, n, seed, keep=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n))).shuffle(seed)
    ds = ds.map(lambda i, tag=tag: {"tag": np.int64(tag), "id": np.int64(i)})
    return ds if keep is None else ds.filter(keep)


def components(b_seed=2):
    return [
        component(0, SIZES[0], seed=1),
        component(1, SIZES[1], seed=b_seed, keep=lambda e: e["id"] % 5 != 3),
    ]


def tokens(e):
    return {"tokens": np.full(int(e["id"]) % 7 + 1, e["tag"] * 1000 + e["id"], np.int64)}


def mixed(weights, hosts=1, host=0, tail=None, on_end="drop", seed=5, b_seed=2):
    """The mixture on host `host` of `hosts`, with `tail` after it: None, "batch" or "pack"."""
    parts = components(b_seed)
    if tail == "pack":
        parts = [part.map(tokens) for part in parts]
    ds = tpufeed.Dataset.mix(parts, weights=list(weights), seed=seed, on_end=on_end)
    ds = ds.shard(host, hosts)
    if tail == "pack":
        return ds.pack({"tokens": 8}, open_rows=2).batch(2)
    return ds.batch(3) if tail == "batch" else ds


def outputs(item, tail=None):
    """(component, record) of each element an item holds, in order."""
    if tail != "pack":
        tags, ids = np.atleast_1d(item["tag"]).tolist(), np.atleast_1d(item["id"]).tolist()
        return list(zip(tags, ids))
    out = []
    for row, segments in zip(item["tokens"], item["tokens_segment_ids"]):
        for s in np.unique(segments[segments > 0]).tolist():
            value = int(row[segments == s][0])
            out.append((value // 1000, value % 1000))
    return out


def own_order(tag, hosts=1, host=0):
    """Component `tag`'s records on host `host` of `hosts`, in its own order (one epoch)."""
    ds = components()[tag].shard(host, hosts)
    return [int(e["id"]) for e in ds]


def of(pairs, tag):
    return [i for t, i in pairs if t == tag]


def saved(it):
    return json.loads(json.dumps(it.get_state()))  # as a checkpoint keeps it


@pytest.mark.parametrize("tail", [None, "batch", "pack"])
@pytest.mark.parametrize("step", [0, 1, 4, 9])
def test_each_component_continues_exactly_where_it_stood(tail, step):
    it = mixed(OLD, tail=tail).iterator()
    before = [x for _ in range(step) for x in outputs(next(it), tail)]
    resumed = mixed(NEW, tail=tail).iterator(saved(it), allow_new_weights=True)
    after = [x for item in resumed for x in outputs(item, tail)]
    for tag in (0, 1):
        got = of(before, tag) + of(after, tag)
        if tail == "pack":  # rows fill as elements fit, not in their order: once each
            assert sorted(got) == sorted(own_order(tag)), f"component {tag}"
        else:
            assert got == own_order(tag), f"component {tag}"


@pytest.mark.parametrize("step", [0, 3, 10])
def test_the_new_weights_schedule_starts_at_the_resume_point(step):
    """The components of the outputs after the change are the new weights' schedule from
    its start, not the old counts' (which would first make up for years of the old mix)."""
    it = mixed(OLD, on_end="restart").iterator()
    for _ in range(step):
        next(it)
    resumed = mixed(NEW, on_end="restart").iterator(saved(it), allow_new_weights=True)
    got = [outputs(next(resumed))[0][0] for _ in range(60)]
    expected = next_components([0, 0], NEW, phases(5, 2), [True, True], 60).tolist()
    assert got == expected
    assert got.count(1) == pytest.approx(0.75 * 60, abs=1)


def test_a_state_taken_after_the_change_resumes_exactly_into_the_new_mix():
    it = mixed(OLD, tail="batch").iterator()
    next(it)
    resumed = mixed(NEW, tail="batch").iterator(saved(it), allow_new_weights=True)
    for _ in range(3):
        next(resumed)
    again = mixed(NEW, tail="batch").iterator(saved(resumed))
    assert [outputs(i) for i in again] == [outputs(i) for i in resumed]


def test_the_same_weights_resume_as_if_uninterrupted():
    it = mixed(OLD, on_end="restart").iterator()
    full = [outputs(next(it)) for _ in range(30)]
    it = mixed(OLD, on_end="restart").iterator()
    for _ in range(7):
        next(it)
    resumed = mixed(OLD, on_end="restart").iterator(saved(it), allow_new_weights=True)
    assert [outputs(next(resumed)) for _ in range(23)] == full[7:]


def test_set_state_takes_new_weights_too():
    it = mixed(OLD).iterator()
    before = [x for _ in range(5) for x in outputs(next(it))]
    state = saved(it)
    other = mixed(NEW).iterator()
    next(other)
    other.set_state(state, allow_new_weights=True)
    after = [x for item in other for x in outputs(item)]
    for tag in (0, 1):
        assert of(before, tag) + of(after, tag) == own_order(tag)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.lists(st.integers(0, 8), min_size=4, max_size=4),
    st.sampled_from([None, "batch", "pack"]),
)
def test_every_hosts_state_resumes_into_new_weights_exactly_once_per_component(
    old, new, steps, tail
):
    before, states = [], []
    for host in range(old):
        it = mixed(OLD, old, host, tail).iterator()
        for _ in range(steps[host]):
            item = next(it, None)
            if item is not None:
                before += outputs(item, tail)
        states.append(saved(it))
    after = []
    for host in range(new):
        resumed = mixed(NEW, new, host, tail).iterator(states, allow_new_weights=True)
        after += [x for item in resumed for x in outputs(item, tail)]
    for tag in (0, 1):
        assert sorted(of(before + after, tag)) == sorted(own_order(tag)), f"component {tag}"


@pytest.mark.parametrize("tail", [None, "pack"])
def test_on_the_same_host_count_each_host_continues_its_own_share(tail):
    hosts, steps = 3, (2, 5, 0)
    iterators = [mixed(OLD, hosts, h, tail).iterator() for h in range(hosts)]
    before = [
        [x for _ in range(steps[h]) for x in outputs(next(iterators[h]), tail)]
        for h in range(hosts)
    ]
    states = [saved(it) for it in iterators]
    for h in range(hosts):
        resumed = mixed(NEW, hosts, h, tail).iterator(states, allow_new_weights=True)
        after = [x for item in resumed for x in outputs(item, tail)]
        for tag in (0, 1):
            got, own = of(before[h], tag) + of(after, tag), own_order(tag, hosts, h)
            assert sorted(got) == sorted(own) if tail == "pack" else got == own


@pytest.mark.slow
@pytest.mark.multiprocess
def test_components_with_workers_continue_where_they_stood():
    it = mixed(OLD, tail="batch").workers(2).iterator()
    before = [x for _ in range(4) for x in outputs(next(it))]
    state = saved(it)
    it.close()
    with mixed(NEW, tail="batch").workers(2).iterator(state, allow_new_weights=True) as resumed:
        after = [x for item in resumed for x in outputs(item)]
    for tag in (0, 1):
        assert of(before, tag) + of(after, tag) == own_order(tag)


def _state(step=3, tail="batch"):
    it = mixed(OLD, tail=tail).iterator()
    for _ in range(step):
        next(it)
    return saved(it)


def test_new_weights_without_asking_are_refused():
    with pytest.raises(StateError, match="belongs to another dataset or pipeline"):
        mixed(NEW, tail="batch").iterator(_state())


def test_a_component_that_differs_is_refused_by_name():
    with pytest.raises(StateError, match=r"mixture component #1 .* differs from the state's"):
        mixed(NEW, tail="batch", b_seed=9).iterator(_state(), allow_new_weights=True)


def test_another_count_of_components_is_refused():
    three = tpufeed.Dataset.mix(components() + [component(2, 5, seed=3)], weights=[1, 1, 1], seed=5)
    with pytest.raises(StateError, match="mixture of 3 components"):
        three.batch(3).iterator(_state(), allow_new_weights=True)


@pytest.mark.parametrize(
    "other",
    [
        lambda: mixed(NEW, tail="batch", seed=6),
        lambda: mixed(NEW, tail="batch", on_end="stop"),
        lambda: mixed(NEW, tail=None).batch(4),
        lambda: mixed(NEW, tail=None).batch(3, drop_remainder=True),
    ],
    ids=["seed", "on_end", "batch size", "drop_remainder"],
)
def test_a_mixture_that_differs_by_more_than_its_weights_is_refused(other):
    with pytest.raises(StateError, match=r"seed, on_end or stages after mix .* weights alone"):
        other().iterator(_state(), allow_new_weights=True)


def test_a_state_without_its_weights_is_refused_into_other_weights():
    state = _state()
    del state["mix"]["weights"]  # as an older tpufeed wrote it
    with pytest.raises(StateError, match="does not record the weights"):
        mixed(NEW, tail="batch").iterator(state, allow_new_weights=True)
    rest = [outputs(i) for i in mixed(OLD, tail="batch").iterator(state)]  # its own mix: fine
    assert rest


@pytest.mark.parametrize("bad", [[0.5], [0.5, "x"], [0.5, 0.0], "0.5,0.5"])
def test_malformed_weights_in_a_state_are_named(bad):
    state = _state()
    state["mix"]["weights"] = bad
    with pytest.raises(StateError, match="mix.weights"):
        mixed(NEW, tail="batch").iterator(state, allow_new_weights=True)


def test_the_flag_is_for_mixtures_and_takes_a_bool():
    plain = components()[0].batch(2)
    it = plain.iterator()
    next(it)
    with pytest.raises(InvalidArgumentError, match="not a mixture"):
        plain.iterator(it.get_state(), allow_new_weights=True)
    with pytest.raises(InvalidArgumentError, match="True or False"):
        mixed(NEW).iterator(_state(tail=None), allow_new_weights="yes")
