"""Best-fit packing (`pack(..., method="best_fit")`): the rule, and Grain's best-fit on the same
documents. The stage's exactness (resume at every step, hosts, workers, no lost token) is
checked for both methods in tests/ops/test_pack.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.best_fit import BestFitPacker
from tpufeed.ops.first_fit import RowPacker, Segment


def refs(rows):
    return [[s.ref for s in row.segments] for row in rows]


def adder(packer):
    return lambda n, ref: packer.add(Segment((np.zeros(n),), ref))


def test_a_segment_goes_to_the_row_it_leaves_least_room_in_the_first_of_ties():
    packer = BestFitPacker([10], open_rows=4)
    add = adder(packer)
    assert not add(4, "a") and not add(7, "b") and not add(7, "c") and not add(8, "d")
    assert refs(add(2, "e")) == [["d", "e"]]  # rooms 6, 3, 3, 2: the 2 fills "d", which closes
    assert not add(2, "f")  # rooms 6, 3, 3: the first of the two tightest, "b"
    assert refs(packer.open) == [["a"], ["b", "f"], ["c"]]
    closed = add(3, "g")  # rooms 6, 1, 3: "c" fills and closes, "b" (1 left) had no room
    assert refs(closed) == [["c", "g"]]


def test_first_fit_and_best_fit_differ_where_a_tighter_row_is_open():
    def closed(packer):
        add = adder(packer)
        return refs([row for n, ref in zip((5, 7, 3, 5), "abcd") for row in add(n, ref)])

    # first-fit: the 3 beside the 5; the last 5 fits nowhere, and the fullest (8 of 10) closes
    assert closed(RowPacker([10], open_rows=2)) == [["a", "c"]]
    assert closed(BestFitPacker([10], open_rows=2)) == [["b", "c"], ["a", "d"]]  # both full


def test_with_no_room_anywhere_the_fullest_row_closes_as_in_first_fit():
    packer = BestFitPacker([10], open_rows=2)
    add = adder(packer)
    assert not add(6, "a") and not add(7, "b")
    assert refs(add(5, "c")) == [["b"]]
    assert refs(packer.open) == [["a"], ["c"]]
    assert refs(add(10, "whole")) == [["whole"]]  # a full row of its own, nothing else closes


def test_several_keys_pick_the_least_room_summed_and_need_room_in_every_key():
    packer = BestFitPacker([10, 4], open_rows=4)

    def add(n, m, ref):
        return packer.add(Segment((np.zeros(n), np.zeros(m)), ref))

    assert not add(6, 1, "a") and not add(7, 0, "b") and not add(9, 1, "c")
    assert not add(2, 2, "d")  # rooms (4, 3), (3, 4), (1, 3): a tie of a and b, the first
    assert not add(3, 3, "e")  # rooms (2, 1), (3, 4), (1, 3): only b has room in both keys
    # rooms (2, 1), (0, 1), (1, 3): c is tightest in inputs alone, a summed (3 against 4)
    assert not add(1, 1, "f")
    assert refs(packer.open) == [["a", "d", "f"], ["b", "e"], ["c"]]
    assert refs(add(1, 0, "g")) == [["a", "d", "f", "g"]]  # a row closes when every key is full


def test_an_unknown_method_is_refused_by_name():
    ds = tpufeed.Dataset.from_sequence([{"tokens": [1, 2]}])
    with pytest.raises(InvalidArgumentError, match=r"got 'bestfit' \(did you mean 'best_fit'\?\)"):
        ds.pack({"tokens": 4}, method="bestfit")
    with pytest.raises(InvalidArgumentError, match=r"\['best_fit', 'first_fit'\], got None"):
        ds.pack({"tokens": 4}, method=None)
    assert "method='best_fit'" in repr(ds.pack({"tokens": 4}, method="best_fit"))
    assert "method" not in repr(ds.pack({"tokens": 4}))


def test_a_state_restores_only_into_the_method_it_was_taken_with():
    from tpufeed.errors import StateError

    docs = [{"tokens": np.arange(1, 2 + i % 7, dtype=np.int32)} for i in range(40)]
    ds = tpufeed.Dataset.from_sequence(docs)
    it = ds.pack({"tokens": 8}, method="best_fit").batch(2).iterator()
    next(it)
    with pytest.raises(StateError):
        next(ds.pack({"tokens": 8}).batch(2).iterator(it.get_state()))


# -- against Grain's best-fit on the same documents ------------------------------------------


def rows_of(items):
    """Each row's token runs, one per segment, in order; rows as a sorted list."""
    out = []
    for item in items:
        tokens = np.atleast_2d(item["tokens"])
        ids = np.atleast_2d(item["tokens_segment_ids"])
        for row, seg in zip(tokens, ids):
            runs = [tuple(row[seg == s].tolist()) for s in range(1, int(seg.max(initial=0)) + 1)]
            if runs:
                out.append(tuple(runs))
    return sorted(out)


def documents(sizes):
    return [
        {"tokens": np.arange(r * 100 + 1, r * 100 + 1 + n, dtype=np.int32)}
        for r, n in enumerate(sizes)
    ]


def keyed(items, key):
    """`key`'s tokens and segment ids of each item, under the names `rows_of` reads."""
    return [{"tokens": i[key], "tokens_segment_ids": i[f"{key}_segment_ids"]} for i in items]


def grain_best_fit(docs, lengths, bins):
    grain = pytest.importorskip("grain")
    ds = grain.MapDataset.source(docs).to_iter_dataset()
    packed = grain.experimental.BestFitPackIterDataset(
        ds, length_struct=lengths, num_packing_bins=bins, shuffle_bins=False
    )
    return list(packed)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 16), min_size=1, max_size=40))
def test_the_same_rows_as_grains_best_fit_while_its_bins_hold_every_document(sizes):
    """With as many bins as documents, Grain never emits its bins before the end, and
    tpufeed's `open_rows` never has to close a row that has room: the same placements."""
    docs = documents(sizes)
    ours = tpufeed.Dataset.from_sequence(docs).pack(
        {"tokens": 16}, open_rows=len(docs), method="best_fit"
    )
    assert rows_of(ours) == rows_of(grain_best_fit(docs, {"tokens": 16}, len(docs)))


def test_the_same_rows_as_grains_best_fit_with_inputs_and_targets():
    rng = np.random.default_rng(0)
    docs = [
        {"inputs": d["tokens"], "targets": d["tokens"][: rng.integers(1, 9)]}
        for d in documents(rng.integers(8, 17, 30))
    ]
    lengths = {"inputs": 16, "targets": 8}
    ours = list(tpufeed.Dataset.from_sequence(docs).pack(lengths, open_rows=30, method="best_fit"))
    theirs = grain_best_fit(docs, lengths, 30)
    for key in lengths:
        assert rows_of(keyed(ours, key)) == rows_of(keyed(theirs, key))


def test_where_a_document_fits_no_bin_grain_emits_them_all_and_tpufeed_closes_one():
    """The difference between the two: Grain's bins go out together when one document fits
    none (and start empty again); tpufeed's `open_rows` roll, the fullest closing alone."""
    docs = documents([6, 7, 5, 3, 4])
    ours = tpufeed.Dataset.from_sequence(docs).pack({"tokens": 10}, open_rows=2, method="best_fit")
    runs = [[len(run) for run in row] for row in rows_of(ours)]
    assert sorted(runs) == [[5, 4], [6, 3], [7]]
    theirs = grain_best_fit(docs, {"tokens": 10}, 2)
    assert sorted([len(run) for run in row] for row in rows_of(theirs)) == [[4], [5, 3], [6], [7]]
