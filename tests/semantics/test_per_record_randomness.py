"""DESIGN.md semantics 3, per-record randomness: random_map's rng comes from (seed, epoch,
record) alone, so an augmentation does not change when hosts or batching change."""

import numpy as np

from tests.semantics.numbered import N, make, noisy, records_of


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
    ds = make(
        extra=lambda ds: noisy(ds).random_map(
            lambda e, rng: {**e, "second": rng.integers(0, 2**62)}
        )
    )
    for item in ds:
        assert item["noise"] != item["second"]
