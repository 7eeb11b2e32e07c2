"""flat_map: order kept, exact resume between the pieces of one record, per-piece randomness."""

import json

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError, TransformError


def pieces(e):
    return [{"id": e["id"], "piece": np.int64(k)} for k in range(int(e["id"]) % 4)]


def make(n=30, batch=None, epochs=2, extra=None):
    ds = (
        tpufeed.Dataset.from_sequence(list(range(n)))
        .shuffle(4)
        .map(lambda i: {"id": np.int64(i)})
        .flat_map(pieces)
    )
    if extra is not None:
        ds = extra(ds)
    if batch is not None:
        ds = ds.batch(batch)
    return ds.repeat(epochs)


def pairs(items):
    return [
        (int(i), int(p))
        for item in items
        for i, p in zip(np.atleast_1d(item["id"]), np.atleast_1d(item["piece"]))
    ]


def test_every_piece_comes_once_per_epoch_in_record_order():
    items = list(make(epochs=1))
    got = pairs(items)
    assert sorted(got) == sorted((i, k) for i in range(30) for k in range(i % 4))
    order = [i for i, _ in got]
    assert order == sorted(order, key=order.index)  # a record's pieces are consecutive
    for i in set(order):
        assert [k for j, k in got if j == i] == list(range(i % 4))


def test_a_list_generator_or_empty_iterable_all_work():
    ds = tpufeed.Dataset.from_sequence([3, 0, 2]).flat_map(lambda n: (n * 10 + k for k in range(n)))
    assert list(ds) == [30, 31, 32, 20, 21]


@pytest.mark.parametrize("batch", [None, 1, 3, 7])
def test_a_state_between_pieces_of_one_record_resumes_at_the_next_piece(batch):
    ds = make(batch=batch)
    full = pairs(ds)
    it = ds.iterator()
    delivered = []
    while True:
        state = json.loads(json.dumps(it.get_state()))
        assert pairs(ds.iterator(state)) == full[len(delivered) :]
        try:
            delivered += pairs([next(it)])
        except StopIteration:
            break
    assert delivered == full


def test_a_resumed_state_in_the_middle_of_a_record_says_so():
    it = make(batch=None).iterator()
    emitted = []
    for _ in range(20):
        next(it)
        emitted.append(it.get_state().get("emitted", 0))
    assert max(emitted) >= 2


def test_random_map_after_flat_map_draws_per_piece_the_same_everywhere():
    def noise(e, rng):
        return {**e, "z": rng.integers(0, 2**62)}

    def run(hosts, workers, batch):
        seen = {}
        for host in range(hosts):
            ds = (
                tpufeed.Dataset.from_sequence(list(range(40)))
                .shuffle(1)
                .shard(host, hosts)
                .map(lambda i: {"id": np.int64(i)})
                .flat_map(pieces)
                .random_map(noise)
            )
            ds = (ds.batch(batch) if batch else ds).workers(workers)
            for item in ds:
                for i, p, z in zip(
                    *(np.atleast_1d(item[k]).tolist() for k in ("id", "piece", "z"))
                ):
                    seen[(i, p)] = z
        return seen

    one = run(1, 0, None)
    assert run(3, 0, 4) == one
    assert run(2, 2, 5) == one
    by_record = {}
    for (i, _piece), z in one.items():
        by_record.setdefault(i, []).append(z)
    assert all(len(set(zs)) == len(zs) for zs in by_record.values())


def test_a_failing_flat_map_names_the_record_and_a_non_iterable_is_refused():
    ds = tpufeed.Dataset.from_sequence(list(range(10))).flat_map(lambda i: [1 / (i - 6)])
    with pytest.raises(
        TransformError, match=r"flat_map\(<lambda>\) raised ZeroDivisionError.*record 6"
    ):
        list(ds)
    ds = tpufeed.Dataset.from_sequence(list(range(3))).flat_map(lambda i: {"x": i})
    with pytest.raises(TransformError, match="must return an iterable.*got a dict"):
        list(ds)


def test_flat_map_after_batch_is_refused():
    with pytest.raises(InvalidArgumentError, match="flat_map must come before pack and batch"):
        tpufeed.Dataset.from_sequence([1]).batch(1).flat_map(lambda b: [b])


def test_ignore_errors_skips_a_bad_record_and_keeps_the_others_pieces():
    def bad_four(e):
        if e["id"] == 4:
            raise ValueError("bad")
        return pieces(e)

    ds = (
        tpufeed.Dataset.from_sequence(list(range(12)))
        .map(lambda i: {"id": np.int64(i)})
        .flat_map(bad_four)
        .ignore_errors(1)
        .batch(5)
    )
    it = ds.iterator()
    got = pairs(it)
    assert sorted(got) == sorted((i, k) for i in range(12) if i != 4 for k in range(i % 4))
    assert it.stats().errors == 1
