"""pack: fixed-length rows from sequences of any length, exact, resumable, the same anywhere."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.errors import InvalidArgumentError, TransformError

L = 16
METHODS = ["first_fit", "best_fit"]


def lengths_of(n, seed=0):
    """Skewed lengths: mostly short, some longer than a row."""
    rng = np.random.default_rng(seed)
    return (rng.lognormal(1.8, 0.9, n).astype(int) + 1).tolist()


def docs(n=80, seed=0):
    # Token t of record r is r * 1000 + t + 1: every token says where it comes from.
    return [
        {"tokens": np.arange(r * 1000 + 1, r * 1000 + 1 + k, dtype=np.int32)}
        for r, k in enumerate(lengths_of(n, seed))
    ]


def make(
    n=80,
    batch=4,
    epochs=1,
    open_rows=4,
    hosts=1,
    host=0,
    workers=0,
    shuffle=True,
    extra=None,
    cut=False,
    method="first_fit",
):
    ds = tpufeed.Dataset.from_sequence(docs(n))
    if shuffle:
        ds = ds.shuffle(3)
    ds = ds.shard(host, hosts)
    if extra is not None:
        ds = extra(ds)
    ds = ds.pack({"tokens": L}, open_rows=open_rows, cut=cut, method=method)
    if batch:
        ds = ds.batch(batch)
    return ds.repeat(epochs).workers(workers)


def segments(item):
    """The token runs of an item's rows, one per segment, as tuples."""
    tokens = np.atleast_2d(item["tokens"])
    ids = np.atleast_2d(item["tokens_segment_ids"])
    positions = np.atleast_2d(item["tokens_positions"])
    out = []
    for row, seg, pos in zip(tokens, ids, positions):
        for s in range(1, int(seg.max(initial=0)) + 1):
            run = row[seg == s]
            assert pos[seg == s].tolist() == list(range(len(run)))  # positions restart
            out.append(tuple(run.tolist()))
        assert (row[seg == 0] == 0).all()
    return out


def pieces_of(items):
    return sorted(p for item in items for p in segments(item))


def expected_pieces(n=80, hosts=None):
    out = []
    for d in docs(n):
        t = tuple(d["tokens"].tolist())
        out += [t[i : i + L] for i in range(0, len(t), L)]
    return sorted(out)


@pytest.mark.parametrize("method", METHODS)
def test_rows_are_full_length_with_segments_and_positions(method):
    items = list(make(method=method))
    assert all(item["tokens"].shape == (4, L) for item in items)
    assert all(item["tokens_segment_ids"].dtype == np.int32 for item in items)
    assert pieces_of(items) == expected_pieces()


@pytest.mark.parametrize("method", METHODS)
def test_a_long_sequence_is_split_in_order_not_cut_unless_asked(method):
    items = list(make(batch=None, shuffle=False, method=method))
    by_record = {}
    for item in items:
        for piece in segments(item):
            by_record.setdefault(piece[0] // 1000, []).append(piece)
    for r, d in enumerate(docs()):
        assert sorted(t for p in by_record[r] for t in p) == d["tokens"].tolist()
    cut = pieces_of(make(cut=True, method=method))
    assert cut == sorted(tuple(d["tokens"][:L].tolist()) for d in docs())


@pytest.mark.parametrize("method", METHODS)
def test_the_last_batch_of_every_epoch_is_filled_with_counted_empty_rows(method):
    it = make(batch=5, epochs=2, method=method).iterator()
    items = list(it)
    assert all(item["tokens"].shape == (5, L) for item in items)
    empty = sum(int((item["tokens_segment_ids"].max(axis=1) == 0).sum()) for item in items)
    assert empty == it.stats().padded_rows > 0
    assert 0.5 < it.stats().pack_fill <= 1


@pytest.mark.parametrize("method", METHODS)
def test_inputs_and_targets_pack_together_each_with_its_length(method):
    def pair(d):
        return {"inputs": d["tokens"], "targets": d["tokens"][: max(1, len(d["tokens"]) // 2)]}

    ds = (
        tpufeed.Dataset.from_sequence(docs(40))
        .map(pair)
        .pack({"inputs": 16, "targets": 8}, method=method)
        .batch(2)
    )
    for item in ds:
        assert item["inputs"].shape == (2, 16) and item["targets"].shape == (2, 8)
        # segment s of inputs and segment s of targets come from the same record
        for row in range(2):
            for s in range(1, int(item["inputs_segment_ids"][row].max()) + 1):
                a = item["inputs"][row][item["inputs_segment_ids"][row] == s]
                b = item["targets"][row][item["targets_segment_ids"][row] == s]
                assert len(b) == 0 or a[0] // 1000 == b[0] // 1000


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("workers,prefetch", [(0, 3), (2, 0), (2, 4)])
def test_the_output_is_the_same_for_any_worker_count_and_prefetch(workers, prefetch, method):
    expected = [segments(i) for i in make(epochs=2, method=method)]
    got = [segments(i) for i in make(epochs=2, workers=workers, method=method).prefetch(prefetch)]
    assert got == expected


@pytest.mark.parametrize("method", METHODS)
def test_the_state_holds_refs_not_tokens_and_stays_small_with_16_open_rows(method):
    ds = make(n=400, open_rows=16, batch=8, method=method)
    it = ds.iterator()
    largest = {}
    for _ in it:
        state = it.get_state()
        assert set(state["pack"]) == {"closed", "rows", "loose"}
        # [count, position, output, piece, ...]: refs to records, never tokens
        rows = json.loads(state["pack"]["rows"])  # JSON text: the same structure at every step
        assert all((len(row) - 1) % 3 == 0 and row[0] >= 1 for row in rows)
        if len(json.dumps(state)) > len(json.dumps(largest)):
            largest = state
    assert len(json.dumps(largest)) < 4096
    assert len(json.loads(largest["pack"]["rows"])) >= 16


def test_a_long_document_waiting_in_whole_rows_stays_a_few_ints_in_the_state():
    long = [{"tokens": np.arange(1, 1 + 50 * L, dtype=np.int32)}] + docs(20)
    ds = tpufeed.Dataset.from_sequence(long).pack({"tokens": L}, open_rows=4).batch(2)
    full = [segments(b) for b in ds]
    it = ds.iterator()
    next(it)
    state = it.get_state()
    # 48 whole rows left, from piece 2
    assert [50 - 2, 0, 0, 2] in json.loads(state["pack"]["rows"])
    assert len(json.dumps(state)) < 600
    assert [segments(b) for b in ds.iterator(json.loads(json.dumps(state)))] == full[1:]


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 60), st.integers(1, 6), st.sampled_from([None, 1, 3]), st.integers(1, 5))
def test_resume_at_any_step_continues_exactly(method, n, open_rows, batch, step):
    ds = make(n=n, open_rows=open_rows, batch=batch, epochs=2, method=method)
    full = [segments(i) for i in ds]
    it = ds.iterator()
    for _ in range(min(step, len(full))):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert [segments(i) for i in ds.iterator(state)] == full[min(step, len(full)) :]


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 5),
    st.lists(st.integers(0, 6), min_size=5, max_size=5),
    st.integers(20, 80),
)
def test_all_hosts_states_restore_on_another_host_count_exactly_once(method, old, new, steps, n):
    before, states = [], []
    for host in range(old):
        it = make(n=n, hosts=old, host=host, batch=2, method=method).iterator()
        for _ in range(steps[host]):
            item = next(it, None)
            if item is not None:
                before += segments(item)
        states.append(it.get_state())
    after = []
    for host in range(new):
        after += pieces_of(make(n=n, hosts=new, host=host, batch=2, method=method).iterator(states))
    assert sorted(before + after) == expected_pieces(n)


@pytest.mark.parametrize("method", METHODS)
def test_rows_fill_well_on_skewed_lengths(method):
    it = make(n=2000, open_rows=16, batch=8, method=method).iterator()
    list(it)
    assert it.stats().pack_fill > 0.95


def test_bad_elements_and_bad_places_are_named():
    with pytest.raises(TransformError, match=r"exactly those keys.*\['id', 'tokens'\]"):
        list(tpufeed.Dataset.from_sequence([{"tokens": [1], "id": 3}]).pack({"tokens": 4}))
    with pytest.raises(TransformError, match=r"shape \(2, 2\).*1-D"):
        list(tpufeed.Dataset.from_sequence([{"tokens": [[1, 2], [3, 4]]}]).pack({"tokens": 4}))
    with pytest.raises(InvalidArgumentError, match="before batch"):
        tpufeed.Dataset.from_sequence([]).batch(2).pack({"tokens": 4})
    with pytest.raises(InvalidArgumentError, match="between pack and batch"):
        list(tpufeed.Dataset.from_sequence([]).pack({"tokens": 4}).map(lambda r: r).batch(2))
    for bad in ({}, {"tokens": 0}, {1: 4}):
        with pytest.raises(InvalidArgumentError):
            tpufeed.Dataset.from_sequence([]).pack(bad)


def test_an_edited_pack_state_is_a_state_error_not_a_numpy_error():
    from tpufeed.errors import StateError

    ds = make(n=40)
    it = ds.iterator()
    next(it)
    state = it.get_state()
    rows = json.loads(state["pack"]["rows"])
    overfull = json.loads(json.dumps(state))
    every_segment_in_one_row = [[1, *sum((r[1:] for r in rows), [])]]
    overfull["pack"]["rows"] = json.dumps(every_segment_in_one_row)
    bad_closed = {**state, "pack": {**state["pack"], "closed": -1}}
    for bad, match in ((overfull, "without room"), (bad_closed, "pack.closed is -1")):
        with pytest.raises(StateError, match=match):
            list(ds.iterator(bad))
