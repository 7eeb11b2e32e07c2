"""Order arithmetic: pure functions, tested without I/O."""

import numpy as np
import pytest

from tpufeed.errors import InvalidArgumentError
from tpufeed.order import (Cursor, Shuffle, host_positions, permute, record_indices, resume_cursor,
                           share_size, windowed_permute)

SIZES = [1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 32, 33, 64, 97, 127, 128, 255, 256, 1000, 1023, 1024,
         4099, 65536, 65537, 100003]


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
    others = [permute(np.arange(n), n, seed=1, epoch=0), permute(np.arange(n), n, seed=0, epoch=1),
              permute(np.arange(n), n, seed=0, epoch=2)]
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


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 100, 101])
@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
@pytest.mark.parametrize("base", [0, 3])
def test_host_shares_partition_the_rest_of_the_epoch(n, hosts, base):
    base = min(base, n)
    seen = []
    sizes = []
    for host in range(hosts):
        size = share_size(n, base, host, hosts)
        sizes.append(size)
        seen.extend(host_positions(base, host, hosts, 0, size).tolist())
    assert sorted(seen) == list(range(base, n))
    assert max(sizes) - min(sizes) <= 1


def test_record_indices_without_seed_is_stored_order():
    cursor = Cursor(epoch=4, base=0, hosts=3, host=1, consumed=0)
    assert record_indices(10, None, cursor, 0, 3).tolist() == [1, 4, 7]


def test_resume_on_the_same_hosts_continues_exactly():
    saved = Cursor(epoch=1, base=6, hosts=3, host=2, consumed=5)
    assert resume_cursor(saved, 100, hosts=3, host=2) == saved


@pytest.mark.parametrize("old_hosts,new_hosts", [(4, 2), (2, 3), (3, 8), (8, 1), (1, 4)])
@pytest.mark.parametrize("n", [50, 97])
@pytest.mark.parametrize("steps", [0, 1, 5, 12])
def test_elastic_resume_is_exactly_once(old_hosts, new_hosts, n, steps):
    # Lockstep: every host consumed the same count, at most the shortest share.
    k = min(steps, share_size(n, 0, old_hosts - 1, old_hosts))
    consumed = [p for h in range(old_hosts) for p in host_positions(0, h, old_hosts, 0, k).tolist()]
    saved = Cursor(0, 0, old_hosts, old_hosts - 1, k)
    rest = []
    for host in range(new_hosts):
        c = resume_cursor(saved, n, new_hosts, host)
        if c.epoch == 0:
            rest.extend(host_positions(c.base, c.host, c.hosts, 0, share_size(n, c.base, c.host, c.hosts)).tolist())
    assert sorted(consumed + rest) == list(range(n))


def test_a_finished_epoch_resumes_into_the_next():
    saved = Cursor(epoch=2, base=0, hosts=2, host=1, consumed=share_size(9, 0, 1, 2))
    cursor = resume_cursor(saved, 9, hosts=3, host=0)
    assert cursor == Cursor(2, 8, 3, 0, 0)
    assert share_size(9, cursor.base, 2, 3) == 0  # hosts 1 and 2 go straight to epoch 3


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


def test_record_indices_dispatches_on_the_shuffle_kind():
    cursor = Cursor(epoch=1, base=0, hosts=2, host=1, consumed=0)
    starts = (0, 30, 64)
    assert np.array_equal(record_indices(64, Shuffle(3), cursor, 0, 5),
                          permute(np.array([1, 3, 5, 7, 9]), 64, 3, 1))
    assert np.array_equal(record_indices(64, Shuffle(3, 1, starts), cursor, 0, 5),
                          windowed_permute(np.array([1, 3, 5, 7, 9]), Shuffle(3, 1, starts), 1))
