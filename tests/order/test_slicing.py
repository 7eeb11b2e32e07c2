"""The arithmetic of slice/take/skip (tpufeed.order.slicing): a slice of records before the
shuffle, a slice of places of the shuffled order after it, each epoch's positions 0..count-1."""

import numpy as np
import pytest

from tpufeed.errors import InvalidArgumentError
from tpufeed.order.permutation import Shuffle
from tpufeed.order.slicing import WHOLE, Slicing, check_cut


def every_record(slicing, n, shuffle, epoch):
    return slicing.records_at(n, shuffle, epoch, np.arange(slicing.count(n))).tolist()


@pytest.mark.parametrize("cut", [slice(3, 17), slice(None, 5), slice(4, None, 3), slice(-6, -1)])
def test_a_slice_of_records_is_those_records_in_every_order(cut):
    n = 20
    slicing = WHOLE.sliced(cut, n, shuffled=False)
    assert every_record(slicing, n, None, 0) == list(range(n))[cut]
    for epoch in range(3):
        got = every_record(slicing, n, Shuffle(5), epoch)
        assert sorted(got) == list(range(n))[cut]  # the same records, shuffled among themselves


def test_a_slice_of_places_takes_a_fresh_set_of_records_each_epoch():
    n = 50
    slicing = WHOLE.sliced(slice(0, 10), n, shuffled=True)
    epochs = [every_record(slicing, n, Shuffle(3), epoch) for epoch in range(3)]
    whole = [every_record(WHOLE, n, Shuffle(3), epoch) for epoch in range(3)]
    for got, order in zip(epochs, whole):
        assert got == order[:10]  # the first ten places of that epoch's order
    assert len({tuple(sorted(e)) for e in epochs}) == 3


def test_slices_compose_as_python_slices():
    n = 40
    records = WHOLE.sliced(slice(5, 35), n, False).sliced(slice(2, None, 3), n, False)
    assert every_record(records, n, None, 0) == list(range(n))[5:35][2::3]
    places = records.sliced(slice(1, 6), n, True).sliced(slice(None, None, 2), n, True)
    order = every_record(records, n, Shuffle(1), 2)
    assert every_record(places, n, Shuffle(1), 2) == order[1:6][::2]


def test_records_cannot_be_sliced_after_places():
    places = WHOLE.sliced(slice(0, 5), 10, True)
    with pytest.raises(InvalidArgumentError, match="cannot follow"):
        places.sliced(slice(0, 2), 10, False)


def test_a_windowed_shuffle_keeps_the_shards_a_slice_cuts_through():
    kept = Slicing(records=range(5, 25))
    assert kept.shard_starts((0, 10, 20, 30)) == (0, 5, 15, 20)
    assert WHOLE.shard_starts((0, 10)) == (0, 10)
    with pytest.raises(InvalidArgumentError, match="step 2 keeps no shard whole"):
        Slicing(records=range(0, 30, 2)).shard_starts((0, 10, 20, 30))


def test_index_of_a_record_counts_within_the_records_kept():
    kept = Slicing(records=range(4, 20, 3))
    assert [kept.index_of(r) for r in kept.records] == list(range(len(kept.records)))
    assert WHOLE.index_of(7) == 7


def test_the_fingerprint_sees_a_slice_only_where_there_is_one():
    assert WHOLE.describe() is None
    assert Slicing(records=range(2, 9)).describe() == [[2, 9, 1], [None, None, None]]


@pytest.mark.parametrize(
    "cut,says",
    [
        (3, "takes a slice"),
        (slice("a", 3), "start must be an int"),
        (slice(0, 3, 0), "step must be a positive int"),
        (slice(None, None, -1), "step must be a positive int"),
        (slice(0, 2.5), "stop must be an int"),
    ],
)
def test_bad_cuts_are_refused_naming_the_value(cut, says):
    with pytest.raises(InvalidArgumentError, match=says):
        check_cut(cut, "slice")
