"""DESIGN.md semantics 1-5: exactly once, deterministic, per-record randomness, exact and
elastic resume. Records are integers 0..N-1 so every delivery can be checked."""

import json

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import StateError

N = 37


def make(n=N, seed=7, hosts=1, host=0, batch=None, drop=False, epochs=1, prefetch=0, extra=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n)))
    if seed is not None:
        ds = ds.shuffle(seed)
    ds = ds.shard(host, hosts).map(lambda r: {"record": np.int64(r)})
    if extra is not None:
        ds = extra(ds)
    if batch is not None:
        ds = ds.batch(batch, drop_remainder=drop)
    return ds.repeat(epochs).prefetch(prefetch)


def records_of(item):
    return np.atleast_1d(item["record"]).tolist()


def flat(items):
    return [r for item in items for r in records_of(item)]


# -- 1. exactly once per epoch ----------------------------------------------------------------

@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
@pytest.mark.parametrize("batch", [None, 1, 4, 5])
def test_every_record_once_per_epoch_across_hosts(hosts, batch):
    epochs = 2
    per_epoch = [[] for _ in range(epochs)]
    for host in range(hosts):
        it = make(hosts=hosts, host=host, batch=batch, epochs=epochs).iterator()
        for item in it:
            per_epoch[it.get_state()["epoch"]].extend(records_of(item))
    for delivered in per_epoch:
        assert sorted(delivered) == list(range(N))


@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
def test_drop_remainder_drops_only_each_hosts_last_partial_batch(hosts):
    batch = 3
    total, dropped = [], 0
    for host in range(hosts):
        it = make(hosts=hosts, host=host, batch=batch, drop=True).iterator()
        items = list(it)
        assert all(len(records_of(b)) == batch for b in items)
        share = len(range(host, N, hosts))
        assert it.dropped_records == share % batch
        dropped += it.dropped_records
        total.extend(flat(items))
    assert len(total) == len(set(total)) == N - dropped


def test_batches_never_span_epochs():
    items = list(make(batch=10, epochs=2).iterator())
    assert [len(records_of(b)) for b in items] == [10, 10, 10, 7] * 2


def test_shuffle_changes_order_each_epoch_and_without_shuffle_order_is_stored():
    epochs = [flat(list(make(epochs=1).iterator()))]
    it = make(epochs=3).iterator()
    all_records = flat(list(it))
    assert all_records[:N] == epochs[0]
    assert all_records[:N] != all_records[N:2 * N] != all_records[2 * N:]
    assert flat(make(seed=None).iterator()) == list(range(N))


def test_filter_counts_positions_not_elements():
    keep_even = lambda ds: ds.filter(lambda e: e["record"] % 2 == 0)  # noqa: E731
    out = []
    for host in range(3):
        out += flat(make(hosts=3, host=host, batch=4, extra=keep_even).iterator())
    assert sorted(out) == list(range(0, N, 2))


# -- 2. deterministic -------------------------------------------------------------------------

@pytest.mark.parametrize("prefetch", [0, 1, 4])
def test_same_sequence_whatever_the_prefetch(prefetch):
    expected = flat(make(batch=4, epochs=3).iterator())
    assert flat(make(batch=4, epochs=3, prefetch=prefetch).iterator()) == expected


def test_same_sequence_on_every_run():
    a = flat(make(n=1000, batch=32, epochs=2).iterator())
    b = flat(make(n=1000, batch=32, epochs=2).iterator())
    assert a == b


# -- 3. per-record randomness -----------------------------------------------------------------

def noisy(ds):
    return ds.random_map(lambda e, rng: {**e, "noise": rng.integers(0, 2**62)})


def noise_by_record(hosts, batch, epochs=2):
    seen = {}
    for host in range(hosts):
        it = make(hosts=hosts, host=host, batch=batch, epochs=epochs, extra=noisy).iterator()
        for item in it:
            epoch = it.get_state()["epoch"]
            for r, z in zip(records_of(item), np.atleast_1d(item["noise"]).tolist()):
                seen[(epoch, r)] = z
    return seen


def test_random_map_depends_only_on_seed_epoch_and_record():
    one_host = noise_by_record(hosts=1, batch=None)
    assert noise_by_record(hosts=3, batch=4) == one_host
    assert noise_by_record(hosts=8, batch=5) == one_host
    by_epoch = [[one_host[(e, r)] for r in range(N)] for e in range(2)]
    assert by_epoch[0] != by_epoch[1]
    assert len(set(by_epoch[0])) == N


def test_two_random_maps_get_independent_streams():
    ds = make(extra=lambda ds: noisy(ds).random_map(lambda e, rng: {**e, "second": rng.integers(0, 2**62)}))
    for item in ds:
        assert item["noise"] != item["second"]


# -- 4. exact resume ----------------------------------------------------------------------------

@pytest.mark.parametrize("batch,drop", [(None, False), (4, False), (5, True)])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_at_every_step_across_epochs(batch, drop, prefetch):
    ds = make(n=23, batch=batch, drop=drop, epochs=3, extra=noisy, prefetch=prefetch)
    full = list(ds.iterator())
    assert len(full) > 6
    it = ds.iterator()
    for step in range(len(full) + 1):
        state = json.loads(json.dumps(it.get_state()))
        assert len(json.dumps(state)) < 1024
        rest = list(ds.iterator(state))
        assert _same(rest, full[step:]), f"resume after step {step}"
        if step < len(full):
            assert _same([next(it)], [full[step]])


def test_resume_with_a_filter_continues_after_the_last_batch():
    ds = make(n=50, batch=4, epochs=2, extra=lambda ds: ds.filter(lambda e: e["record"] % 3 != 0))
    full = list(ds.iterator())
    it = ds.iterator()
    for step in range(len(full)):
        assert _same(list(ds.iterator(it.get_state())), full[step:])
        next(it)


def _same(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.keys() != y.keys() or not all(np.array_equal(x[k], y[k]) for k in x):
            return False
    return True


def test_state_is_small_versioned_json():
    it = make(n=10**6, batch=256, epochs=None).iterator()
    next(it)
    state = it.get_state()
    assert state["version"] == 2 and "fingerprint" in state
    assert len(json.dumps(state)) < 1024


def test_a_version_1_state_still_resumes():
    ds = make(batch=4, epochs=2)
    it = ds.iterator()
    next(it)
    state = {**it.get_state(), "version": 1}
    assert _same(list(ds.iterator(state)), list(it))


def test_state_from_another_dataset_is_rejected():
    state = make().iterator().get_state()
    for other in [make(seed=8), make(n=N + 1), make(batch=4), tpufeed.Dataset.from_sequence(list(range(N)))]:
        with pytest.raises(StateError, match="another dataset"):
            other.iterator(state)


@pytest.mark.parametrize("bad", [
    "not json", [], {"version": 99}, {"version": 1},
])
def test_malformed_state_is_rejected(bad):
    with pytest.raises(StateError):
        make().iterator(bad)


def test_state_with_bad_fields_is_rejected():
    state = make().iterator().get_state()
    for key, value in [("epoch", -1), ("hosts", 0), ("host", 5), ("consumed", "3")]:
        with pytest.raises(StateError, match=key if key != "host" else "host"):
            make().iterator({**state, key: value})


@pytest.mark.parametrize("field,value,match", [
    ("consumed", 38, "37 in an epoch"),
    ("base", 40, "past the 37 positions"),
    ("epoch", 2, "runs 2 epoch"),
    ("carries", [[37, 0]], "past the 37 records"),
    ("layers", [[0, 2, 0, [20, 0]]], "does not fit this dataset"),
])
def test_a_state_whose_numbers_do_not_fit_the_dataset_is_refused(field, value, match):
    ds = make(epochs=2)
    state = {**ds.iterator().get_state(), field: value}
    with pytest.raises(StateError, match=match):
        ds.iterator(state)


# -- 5. elastic resume --------------------------------------------------------------------------

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
