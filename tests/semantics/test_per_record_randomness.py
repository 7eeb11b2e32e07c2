"""DESIGN.md semantics 3, per-record randomness: random_map's rng comes from (seed, epoch,
record) alone, so an augmentation does not change when hosts or batching change."""

import numpy as np
import pytest

from tests.semantics.numbered import N, make, noisy, records_of
from tpufeed.errors import InvalidArgumentError, StateError


def noise_by_record(hosts, batch, epochs=2, extra=noisy, seed=7):
    seen = {}
    for host in range(hosts):
        ds = make(seed=seed, hosts=hosts, host=host, batch=batch, epochs=epochs, extra=extra)
        it = ds.iterator()
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
    ds = make(
        extra=lambda ds: noisy(ds).random_map(
            lambda e, rng: {**e, "second": rng.integers(0, 2**62)}
        )
    )
    for item in ds:
        assert item["noise"] != item["second"]


def seeded(seed):
    return lambda ds: ds.random_map(lambda e, rng: {**e, "noise": rng.integers(0, 2**62)}, seed)


def test_a_random_map_seed_of_its_own_keeps_the_rng_per_seed_epoch_and_record():
    """`random_map(fn, seed=3)`, as Grain takes it: the stage's own seed, the rng still from
    (seed, epoch, record) alone."""
    three = noise_by_record(hosts=1, batch=None, extra=seeded(3))
    assert noise_by_record(hosts=3, batch=4, extra=seeded(3)) == three
    assert noise_by_record(hosts=1, batch=None, extra=seeded(3), seed=None).keys() == three.keys()
    # Shuffled or not, the same record in the same epoch draws the same numbers.
    assert noise_by_record(hosts=1, batch=None, extra=seeded(3), seed=None) == three
    four = noise_by_record(hosts=1, batch=None, extra=seeded(4))
    assert all(four[key] != three[key] for key in three)
    assert all(three[(0, r)] != three[(1, r)] for r in range(N))


def test_without_a_seed_random_map_draws_from_the_pipelines_seed():
    shuffled_by_seven = noise_by_record(hosts=1, batch=None)  # shuffle(7), random_map(fn)
    assert noise_by_record(hosts=1, batch=None, extra=seeded(7)) == shuffled_by_seven
    unshuffled = noise_by_record(hosts=1, batch=None, seed=None)  # the pipeline seed is 0
    assert noise_by_record(hosts=1, batch=None, extra=seeded(0), seed=None) == unshuffled
    assert unshuffled != shuffled_by_seven


@pytest.mark.multiprocess
def test_a_seeded_random_map_draws_the_same_in_worker_processes():
    ds = make(batch=4, epochs=2, extra=seeded(3))
    expected = [item["noise"].tolist() for item in ds]
    assert [item["noise"].tolist() for item in ds.workers(2)] == expected


def test_a_random_maps_seed_is_part_of_the_pipeline_so_states_do_not_cross():
    three, four = make(extra=seeded(3)), make(extra=seeded(4))
    assert three.fingerprint() != four.fingerprint() != make(extra=noisy).fingerprint()
    it = three.iterator()
    next(it)
    with pytest.raises(StateError, match="another dataset or pipeline"):
        four.iterator(it.get_state())
    for bad in ("3", 2.5, True):
        with pytest.raises(InvalidArgumentError, match="random_map seed must be None or an int"):
            make(extra=seeded(bad))
