"""`slice`, `take` and `skip` (and `ds[a:b]`): what each selects, as Grain's `MapDataset.slice`
and tf.data's `take`/`skip` select it; refused where counting records would not mean what the
user counts; exact resume and exactly once across hosts (every host count, both kinds of
slice) are in tests/semantics (test_exactly_once.py, test_restore_every_step.py)."""

import itertools

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError, StateError

N = 23
CUTS = [slice(3, 17), slice(None, 5), slice(4, None, 3), slice(-6, -1), slice(30, 40), slice(2, 2)]


def numbers(n=N):
    return tpufeed.Dataset.source(list(range(n)))


@pytest.mark.parametrize("cut", CUTS, ids=str)
def test_slice_selects_what_grains_slice_selects(cut):
    grain = pytest.importorskip("grain")
    expected = list(grain.MapDataset.source(list(range(N))).slice(cut))
    assert list(numbers().slice(cut)) == expected
    assert list(numbers()[cut]) == list(grain.MapDataset.source(list(range(N)))[cut]) == expected
    assert len(numbers().slice(cut)) == len(expected)


def test_slices_of_slices_compose_as_grains_do():
    grain = pytest.importorskip("grain")
    expected = list(grain.MapDataset.source(list(range(N)))[2:20][::3][1:])
    assert list(numbers()[2:20][::3][1:]) == expected


@pytest.mark.parametrize(
    "chain",
    [
        lambda ds: ds.take(5),
        lambda ds: ds.skip(5),
        lambda ds: ds.skip(3).take(4),
        lambda ds: ds.take(30).skip(20),
        lambda ds: ds.take(-1),
        lambda ds: ds.skip(-1),
        lambda ds: ds.take(0),
    ],
)
def test_take_and_skip_select_what_tf_data_selects(chain):
    assert list(chain(numbers())) == _tf_data_list(chain)


def _tf_data_list(chain):
    """The same chain on a list with tf.data's rules: take(-1) all, skip(-1) all skipped."""

    class Listed:
        def __init__(self, items):
            self.items = items

        def take(self, n):
            return Listed(self.items if n == -1 else self.items[:n])

        def skip(self, n):
            return Listed([] if n == -1 else self.items[n:])

    return chain(Listed(list(range(N)))).items


@pytest.mark.slow
def test_take_and_skip_against_tf_data_itself():
    tf = pytest.importorskip("tensorflow")
    for chain in [lambda ds: ds.skip(3).take(4), lambda ds: ds.take(-1), lambda ds: ds.skip(-1)]:
        expected = [int(x) for x in chain(tf.data.Dataset.range(N)).as_numpy_iterator()]
        assert list(chain(numbers())) == expected


def test_before_shuffle_a_slice_keeps_records_after_it_places_of_each_order():
    records = numbers().take(6).shuffle(seed=3).repeat(3)
    epochs = [sorted(e) for e in _epochs(records, 6)]
    assert epochs == [list(range(6))] * 3  # the same six records, each epoch reshuffled
    places = numbers().shuffle(seed=3).take(6).repeat(3)
    chosen = _epochs(places, 6)
    whole = _epochs(numbers().shuffle(seed=3).repeat(3), N)
    assert chosen == [epoch[:6] for epoch in whole]  # the first places of each epoch's order
    assert len({tuple(sorted(e)) for e in chosen}) == 3  # a fresh choice of records each epoch


def _epochs(ds, size):
    items = list(ds)
    return [items[i : i + size] for i in range(0, len(items), size)]


def test_len_counts_the_sliced_epoch():
    assert len(numbers().skip(3).batch(4)) == 5  # 20 records
    assert len(numbers().shuffle(0).take(10).batch(4, drop_remainder=True).repeat(2)) == 4


def test_map_and_random_map_before_a_slice_are_fine():
    ds = numbers().map(lambda x: x * 10).random_map(lambda x, rng: x).take(3)
    assert list(ds) == [0, 10, 20]


@pytest.mark.parametrize(
    "chain,says",
    [
        (lambda ds: ds.filter(lambda x: x % 2).take(3), "before filter"),
        (lambda ds: ds.flat_map(lambda x: [x, x]).skip(3), "before flat_map"),
        (lambda ds: ds.batch(4).take(2), "before batch"),
        (lambda ds: ds.map(lambda x: {"t": [x]}).pack({"t": 4}).take(2), "before pack"),
        (lambda ds: ds.repeat(2).take(3), "before repeat"),
        (lambda ds: ds.repeat().skip(3), "before repeat"),
        (lambda ds: ds.take(-2), "number of records >= 0"),
        (lambda ds: ds.take(2.5), "number of records >= 0"),
        (lambda ds: ds.skip(True), "number of records >= 0"),
        (lambda ds: ds.slice(3), "takes a slice"),
        (lambda ds: ds[::-1], "step must be a positive int"),
    ],
)
def test_refused_where_counting_records_is_not_what_the_user_counts(chain, says):
    with pytest.raises(InvalidArgumentError, match=says):
        chain(numbers())


def test_a_mixture_is_cut_in_its_components():
    mixed = tpufeed.Dataset.mix([numbers(), numbers()])
    with pytest.raises(InvalidArgumentError, match="each component of a mixture"):
        mixed.take(3)
    cut = tpufeed.Dataset.mix([numbers().take(2), numbers().skip(21)], on_end="stop")
    assert sorted(cut) == [0, 1, 21, 22]


def test_a_state_of_one_slice_is_refused_by_another():
    it = numbers().take(10).iterator()
    next(it)
    state = it.get_state()
    assert next(numbers().take(10).iterator(state)) == 1
    with pytest.raises(StateError):
        numbers().take(11).iterator(state)


def test_an_unsliced_pipeline_keeps_its_fingerprint():
    """States saved before slices existed still restore: a pipeline without a slice
    fingerprints as it did (tests/semantics/test_saved_states.py checks the saved ones)."""
    assert numbers().fingerprint() == numbers().take(-1).fingerprint() == numbers()[:].fingerprint()
    assert numbers().fingerprint() != numbers().take(5).fingerprint()


def test_a_windowed_shuffle_of_a_slice_reads_whole_shards(tmp_path):
    from tpufeed.sources.array_record.writer import write_array_records as write

    paths = []
    for shard in range(4):
        path = str(tmp_path / f"part-{shard}.array_record")
        write(path, [np.int64(10 * shard + i).tobytes() for i in range(10)])
        paths.append(path)
    ds = tpufeed.Dataset.from_array_record(paths).map(lambda r: int(np.frombuffer(r, np.int64)[0]))
    got = list(ds.skip(5).take(20).shuffle(seed=1, window=1))
    assert sorted(got) == list(range(5, 25))
    runs = [list(g) for _, g in itertools.groupby(got, key=lambda r: r // 10)]
    assert len(runs) == 3  # one shard (of those the slice cuts through) at a time
    with pytest.raises(InvalidArgumentError, match="step 2 keeps no shard whole"):
        list(ds[::2].shuffle(seed=1, window=1))
