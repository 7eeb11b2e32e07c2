"""Batches lent to the consumer straight out of a worker's slot: never copied, intact while held,
and their slots back when dropped."""

import numpy as np
import pytest

import tpufeed

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]


def _batches_of(n, batch, workers, prefetch=0, isolate=False):
    return (
        tpufeed.Dataset.from_sequence([{"x": np.full(64, i, np.int64)} for i in range(n)])
        .shuffle(3)
        .map(lambda e: {"x": e["x"] * 2})
        .batch(batch)
        .prefetch(prefetch)
        .workers(workers, isolate=isolate)
    )


def _lent(array):
    """Whether a batch leaf is a view of a worker's slot (lent) rather than memory of its own."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return not isinstance(array, np.ndarray) or not array.flags.owndata


@pytest.mark.parametrize("prefetch", [0, 3])
def test_batches_are_lent_not_copied_and_stay_intact_while_held(prefetch):
    expected = [b["x"].copy() for b in _batches_of(400, 8, 0)]
    # Isolated, every batch comes from a worker: none is made by the parent while the workers
    # start, or run by it on a spare core, so how many are lent does not depend on timing.
    it = iter(_batches_of(400, 8, 2, prefetch, isolate=True))
    kept, lent = [], 0
    for k, batch in enumerate(it):
        lent += _lent(batch["x"])
        np.testing.assert_array_equal(batch["x"], expected[k])
        if k % 10 == 0:
            kept.append((k, batch))  # held while 20 more batches are written by the workers
        batch["x"] += 1  # the consumer owns what it holds: writing into it harms nothing
        batch["x"] -= 1
        if len(kept) > 2:
            old_k, old = kept.pop(0)
            np.testing.assert_array_equal(old["x"], expected[old_k])
            del old  # so the consumer holds at most three: two kept and the current one
    it.close()
    # A consumer holding two batches past their step, on top of the current one, still gets
    # every batch lent, whichever worker made the batches it keeps. With a prefetch thread also
    # holding some, most are.
    assert lent == len(expected) if prefetch == 0 else lent >= len(expected) * 3 // 4, lent


def test_a_consumer_that_keeps_every_batch_never_stalls_the_workers():
    expected = [b["x"].copy() for b in _batches_of(600, 4, 0)]
    got = list(_batches_of(600, 4, 2))  # far more batches than the workers have slots
    assert len(got) == len(expected) == 150
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a["x"], b)


def test_dropped_batches_give_their_slots_back():
    from tpufeed.run.workers.leases import Leases

    leases = Leases(workers=1, cap=2)
    segment = bytearray(256)
    first = leases.lend(0, 0, segment, 128)
    view = first[64:].view(np.int64)
    leases.lend(0, 1, segment, 128)  # dropped at once
    assert not leases.can_lend(0)
    assert leases.returned() == [(0, 1)]
    del first
    assert leases.returned() == []  # a view of the batch is still held
    del view
    assert leases.returned() == [(0, 0)] and leases.lent == [0] and leases.can_lend(0)


def test_under_a_budget_lent_batches_take_at_most_half_a_workers_share():
    from tpufeed.run.workers.leases import Leases

    leases = Leases(workers=2, cap=8, share=1000)
    segment = bytearray(1000)
    assert not leases.can_lend(0, 501)  # copied instead: the worker keeps room to work
    base = leases.lend(0, 0, segment, 400)
    assert leases.can_lend(0, 100) and not leases.can_lend(0, 101) and leases.can_lend(1, 500)
    del base
    assert leases.returned() == [(0, 0)] and leases.lent_bytes == [0, 0]
