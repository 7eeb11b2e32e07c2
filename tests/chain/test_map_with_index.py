"""`map_with_index(fn)`: fn(index, element) as Grain's `MapDataset.map_with_index` calls it,
compared with Grain's own pipeline on the same records (slices, repeat before and after, a
shuffle after it, Grain's MapWithIndex objects); the same indices whatever the workers, hosts
and restores; refused where Grain's index would mean something tpufeed does not give."""

import pytest

import tpufeed
from tests.semantics.restore import assert_equal_output_after_checkpoint
from tpufeed.errors import InvalidArgumentError

grain = pytest.importorskip("grain")

N = 17


def pair(index, element):
    return (int(index), element)


def numbers(n=N):
    return tpufeed.Dataset.source(list(range(n)))


def grains(n=N):
    return grain.MapDataset.source(list(range(n)))


@pytest.mark.parametrize(
    "tpufeed_chain,grain_chain",
    [
        (lambda ds: ds.map_with_index(pair), lambda ds: ds.map_with_index(pair)),
        (
            lambda ds: ds.slice(slice(2, 15, 3)).map_with_index(pair),
            lambda ds: ds.slice(slice(2, 15, 3)).map_with_index(pair),
        ),
        (
            lambda ds: ds.map_with_index(pair).repeat(3),
            lambda ds: ds.map_with_index(pair).repeat(3),
        ),
        (
            lambda ds: ds.skip(4).repeat(3).map_with_index(pair),
            lambda ds: ds[4:].repeat(3).map_with_index(pair),
        ),
        (
            lambda ds: ds.map(lambda x: x * 10).map_with_index(pair).filter(lambda p: p[1] % 3),
            lambda ds: ds.map(lambda x: x * 10).map_with_index(pair).filter(lambda p: p[1] % 3),
        ),
        (
            lambda ds: ds.map_with_index(pair).take(5),
            lambda ds: ds.map_with_index(pair)[:5],
        ),
    ],
    ids=["plain", "slice", "then-repeat", "after-repeat", "with-filter", "then-take"],
)
def test_the_same_indices_as_grains_map_with_index(tpufeed_chain, grain_chain):
    expected = list(grain_chain(grains()))
    assert list(tpufeed_chain(numbers())) == expected
    assert expected  # not two empty lists


def test_a_shuffle_after_it_moves_records_with_their_index_as_grains_does():
    ours = list(numbers().map_with_index(pair).shuffle(seed=3))
    theirs = list(grains().map_with_index(pair).shuffle(seed=3))
    assert ours != sorted(ours)  # shuffled, by another permutation than Grain's
    assert sorted(ours) == sorted(theirs) == [(i, i) for i in range(N)]
    ours = list(numbers().map_with_index(pair).shuffle(seed=3).repeat(2))
    theirs = list(grains().map_with_index(pair).shuffle(seed=3).repeat(2))
    assert sorted(ours) == sorted(theirs) == [(i, i % N) for i in range(2 * N)]


def test_indexing_past_the_first_epoch_as_grains_ds_i():
    ours, theirs = numbers(5).map_with_index(pair).repeat(), grains(5).map_with_index(pair)
    assert [ours[i] for i in (0, 3, 7, 12)] == [theirs[i] for i in (0, 3, 7, 12)]


def test_grains_map_with_index_object():
    class Tag(grain.transforms.MapWithIndex):
        def map_with_index(self, index, element):
            return f"{element}@{index}"

    ds = numbers(5).map_with_index(Tag())
    assert list(ds) == list(grains(5).map_with_index(Tag())) == [f"{i}@{i}" for i in range(5)]
    with pytest.raises(InvalidArgumentError, match=r"map\(Tag\).*pass it to map_with_index"):
        numbers().map(Tag())


@pytest.mark.parametrize(
    "chain,says",
    [
        (lambda ds: ds.shuffle(1).map_with_index(pair), "after shuffle"),
        (lambda ds: ds.flat_map(lambda x: [x, x]).map_with_index(pair), "after flat_map"),
        (lambda ds: ds.batch(2).map_with_index(pair), "before pack and batch"),
        (lambda ds: ds.map_with_index(3), "map_with_index"),
        (
            lambda ds: ds.map_with_index(pair).cache("/tmp/never", 1 << 20),
            "index counts on over the epochs",
        ),
    ],
)
def test_refused_where_the_index_would_not_be_grains(chain, says):
    with pytest.raises(InvalidArgumentError, match=says):
        chain(numbers())


def test_the_index_is_part_of_the_fingerprint():
    a = numbers().map_with_index(pair)
    assert a.fingerprint() != numbers().map(lambda x: x).fingerprint()
    assert a.fingerprint() != numbers().skip(1).map_with_index(pair).fingerprint()


def test_several_hosts_deliver_grains_indices_once():
    expected = list(grains().slice(slice(1, None)).repeat(2).map_with_index(pair))
    for hosts in (1, 2, 3, 5):
        got = []
        for host in range(hosts):
            ds = numbers().skip(1).map_with_index(pair).shuffle(seed=7).repeat(2)
            got += list(ds.shard(host, hosts))
        assert sorted(got) == sorted(expected), hosts


def test_an_elastic_resume_keeps_each_records_index():
    ds = numbers(40).map_with_index(pair).shuffle(seed=2).filter(lambda p: p[1] % 4)
    first = []
    states = []
    for host in range(3):
        with ds.shard(host, 3).iterator() as it:
            first += [next(it) for _ in range(2 + host)]
            states.append(it.get_state())
    rest = []
    for host in range(2):
        with ds.shard(host, 2).iterator(states) as it:
            rest += list(it)
    assert sorted(first + rest) == [(i, i) for i in range(40) if i % 4]


@pytest.mark.multiprocess
def test_workers_give_the_same_indices_and_restore_at_every_step():
    ds = numbers(30).skip(2).map_with_index(pair).shuffle(seed=5).repeat(2).batch(8)
    straight = [b.tolist() for b in ds]
    items = assert_equal_output_after_checkpoint(ds.workers(2, isolate=True))
    assert [item[2] for item in items] == straight  # plain(): (dtype, shape, values)
    assert sorted(tuple(p) for b in straight for p in b) == [(i, i % 28 + 2) for i in range(56)]
