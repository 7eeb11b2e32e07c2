"""Grain's transform objects in `map`, `random_map`, `filter` and `flat_map` (grain.transforms'
`Map`, `RandomMap`, `Filter`, and `FlatMap`, which Grain 0.2 exports as
`grain.experimental.FlatMapTransform`): each called by the method Grain calls, compared with
Grain's own pipeline on the same records; another kind is refused naming its stage; a FlatMap
past its `max_fan_out` raises as Grain's does; with workers and in a restored iterator alike."""

import dataclasses

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError, TransformError

grain = pytest.importorskip("grain")

N = 20


@dataclasses.dataclass(frozen=True)
class Scale(grain.transforms.Map):
    factor: int

    def map(self, element):
        return element * self.factor


class Odd(grain.transforms.Filter):
    def filter(self, element):
        return element % 2 == 1


class Noise(grain.transforms.RandomMap):
    def random_map(self, element, rng):
        assert isinstance(rng, np.random.Generator)
        return (element, int(rng.integers(0, 1 << 30)))


class Split(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element * 10 + k for k in range(element % 4)]  # 0..3 pieces


def numbers(n=N):
    return tpufeed.Dataset.source(list(range(n)))


def grains(n=N):
    return grain.MapDataset.source(list(range(n)))


def test_map_and_filter_objects_give_grains_elements():
    ours = numbers().map(Scale(3)).filter(Odd())
    theirs = grains().map(Scale(3)).filter(Odd())
    assert list(ours) == list(theirs) == [3 * i for i in range(N) if i % 2]


def test_a_flat_map_object_gives_grains_pieces():
    class Fewer(Split):
        max_fan_out = 4

    theirs = list(grain.experimental.FlatMapMapDataset(grains(), Fewer()))
    assert list(numbers().flat_map(Fewer())) == theirs
    assert theirs == [i * 10 + k for i in range(N) for k in range(i % 4)]


def test_a_flat_map_past_its_max_fan_out_raises_as_grains_does():
    with pytest.raises(ValueError, match="max fan-out"):
        list(grain.experimental.FlatMapMapDataset(grains(), Split()))
    with pytest.raises(TransformError, match=r"flat_map\(Split\).*max_fan_out of 2.*record 3"):
        list(numbers().flat_map(Split()))


def test_a_random_map_object_gets_the_rng_random_map_gives_a_function():
    """Grain's rng comes from its own Philox stream (not tpufeed's), so the draws differ from
    Grain's; the object gets exactly what a function would: (seed, epoch, record)'s rng."""
    as_object = list(numbers().shuffle(4).random_map(Noise(), seed=9).repeat(2))
    as_function = list(numbers().shuffle(4).random_map(Noise().random_map, seed=9).repeat(2))
    assert as_object == as_function
    assert sorted(e for e, _ in as_object) == sorted(list(range(N)) * 2)
    first, second = as_object[:N], as_object[N:]
    assert dict(first) != dict(second)  # each epoch its own draws
    theirs = list(grains().shuffle(4).random_map(Noise(), seed=9))
    assert sorted(e for e, _ in theirs) == list(range(N))  # Grain calls it the same way


def test_stage_names_and_errors_name_the_transform_class():
    class Boom(grain.transforms.Map):
        def map(self, element):
            if element == 5:
                raise KeyError("no five")
            return element

    ds = numbers().map(Boom())
    assert "map(Boom)" in repr(ds)
    with pytest.raises(TransformError, match=r"map\(Boom\).*record 5"):
        list(ds)


@pytest.mark.parametrize(
    "stage,transform,belongs",
    [
        ("map", Odd(), "filter"),
        ("filter", Scale(2), "map"),
        ("random_map", Scale(2), "map"),
        ("map", Noise(), "random_map"),
        ("map", Split(), "flat_map"),
        ("flat_map", Scale(2), "map"),
    ],
)
def test_another_kind_is_refused_naming_its_stage(stage, transform, belongs):
    with pytest.raises(InvalidArgumentError, match=rf"pass it to {belongs}\(\)"):
        getattr(numbers(), stage)(transform)


def test_the_class_itself_is_refused():
    with pytest.raises(InvalidArgumentError, match=r"did you mean Odd\(\)"):
        numbers().filter(Odd)


def test_a_cache_key_follows_the_transforms_code_and_settings(tmp_path):
    from tpufeed.ops.cache import cache_key
    from tpufeed.ops.grain_transforms import grain_function
    from tpufeed.ops.map import Map

    source = numbers()._source

    def key(transform):
        return cache_key(source, [Map(grain_function(transform, "map"))])

    class Other(grain.transforms.Map):
        def map(self, element):
            return element * 2

    assert key(Scale(2)) == key(Scale(2))
    assert len({key(Scale(2)), key(Scale(3)), key(Other())}) == 3


@pytest.mark.multiprocess
def test_in_workers_and_across_a_restore():
    ds = numbers(40).map(Scale(2)).flat_map(_Capped()).random_map(Noise()).filter(_Keep())
    ds = ds.shuffle(1).batch(4)
    straight = [b.tolist() for b in ds]
    with ds.workers(2, isolate=True).iterator() as it:
        head = [next(it).tolist() for _ in range(3)]
        state = it.get_state()
    with ds.workers(2, isolate=True).iterator(state) as it:
        assert head + [b.tolist() for b in it] == straight


class _Capped(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element, element + 1][: 1 + element % 2]


class _Keep(grain.transforms.Filter):
    def filter(self, element):
        return element[0] % 3 != 0
