"""Order arithmetic: pure functions, tested without I/O."""

import numpy as np
import pytest

from tpufeed.errors import InvalidArgumentError
from tpufeed.order.permutation import Shuffle, permute, records_at, windowed_permute

SIZES = [
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    13,
    16,
    31,
    32,
    33,
    64,
    97,
    127,
    128,
    255,
    256,
    1000,
    1023,
    1024,
    4099,
    65536,
    65537,
    100003,
]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [0, 1, 2**40])
def test_permute_is_a_bijection(n, seed):
    out = permute(np.arange(n), n, seed=seed, epoch=3)
    assert out.dtype == np.int64
    assert np.array_equal(np.sort(out), np.arange(n))


def test_permute_of_a_slice_matches_the_whole():
    n = 10007
    whole = permute(np.arange(n), n, seed=5, epoch=1)
    assert np.array_equal(permute(np.arange(300, 700), n, 5, 1), whole[300:700])
    picks = np.array([9000, 3, 17, 3])
    assert np.array_equal(permute(picks, n, 5, 1), whole[picks])


def test_seeds_and_epochs_give_different_orders():
    n = 1000
    base = permute(np.arange(n), n, seed=0, epoch=0)
    others = [
        permute(np.arange(n), n, seed=1, epoch=0),
        permute(np.arange(n), n, seed=0, epoch=1),
        permute(np.arange(n), n, seed=0, epoch=2),
    ]
    for other in others:
        assert np.mean(other == base) < 0.05
    assert not np.array_equal(others[1], others[2])


def test_permutation_is_well_mixed():
    n = 100_000
    out = permute(np.arange(n), n, seed=3, epoch=0)
    # Neighbouring positions land far apart, and the order is not close to the identity.
    assert abs(np.corrcoef(np.arange(n), out)[0, 1]) < 0.02
    assert np.median(np.abs(np.diff(out))) > n / 10
    # Each tenth of the records is spread over the whole epoch.
    first_tenth = np.flatnonzero(out < n // 10)
    assert np.histogram(first_tenth, bins=10, range=(0, n))[0].min() > 800


def test_permute_rejects_out_of_range_positions():
    with pytest.raises(InvalidArgumentError):
        permute(np.array([5]), 5, seed=0, epoch=0)


def test_records_without_seed_are_in_stored_order():
    assert records_at(10, None, 4, np.array([1, 4, 7])).tolist() == [1, 4, 7]


LAYOUTS = [(0, 5, 12, 12, 20, 33, 40), (0, 1), (0, 0, 3), tuple(range(0, 101, 10)), (0, 7, 7, 7, 9)]


@pytest.mark.parametrize("starts", LAYOUTS)
@pytest.mark.parametrize("window", [1, 2, 3, 50])
@pytest.mark.parametrize("epoch", [0, 1])
def test_windowed_shuffle_is_a_bijection_reading_few_shards_at_a_time(starts, window, epoch):
    n = starts[-1]
    shuffle = Shuffle(seed=4, window=window, shard_starts=starts)
    out = windowed_permute(np.arange(n), shuffle, epoch)
    assert sorted(out.tolist()) == list(range(n))
    shard_of = np.searchsorted(np.array(starts), out, side="right") - 1
    # Walk the epoch: each shard is used in one contiguous stretch (its window), and no stretch
    # of the order touches more than `window` shards' windows at once.
    first, last = {}, {}
    for position, shard in enumerate(shard_of.tolist()):
        first.setdefault(shard, position)
        last[shard] = position
    for position in range(n):
        live = sum(1 for s in first if first[s] <= position <= last[s])
        assert live <= window


def test_windowed_shuffle_slices_match_the_whole_and_epochs_differ():
    starts = tuple(range(0, 1001, 100))
    shuffle = Shuffle(seed=9, window=3, shard_starts=starts)
    whole = windowed_permute(np.arange(1000), shuffle, 0)
    assert np.array_equal(windowed_permute(np.arange(250, 600), shuffle, 0), whole[250:600])
    assert not np.array_equal(windowed_permute(np.arange(1000), shuffle, 1), whole)
    # records of a window are interleaved, not read shard after shard
    shards = whole[:300] // 100
    assert len(set(shards[:20].tolist())) == 3


def test_records_at_dispatches_on_the_shuffle_kind():
    starts = (0, 30, 64)
    positions = np.array([1, 3, 5, 7, 9])
    assert np.array_equal(records_at(64, Shuffle(3), 1, positions), permute(positions, 64, 3, 1))
    assert np.array_equal(
        records_at(64, Shuffle(3, 1, starts), 1, positions),
        windowed_permute(positions, Shuffle(3, 1, starts), 1),
    )
