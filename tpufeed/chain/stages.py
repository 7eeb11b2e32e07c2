"""What happens to the elements: `map`, `random_map`, `filter`, `flat_map`, `cache`, `pack` and
`batch`, run in the order they are chained (stages after `batch` see whole batches)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpufeed.chain.base import Chain
from tpufeed.chain.expected_fill import expected_fit, note_fit
from tpufeed.chain.tf_data import memory_cache
from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.batch import Batch
from tpufeed.ops.filter import Filter
from tpufeed.ops.first_fit import check_lengths
from tpufeed.ops.flat_map import FlatMap
from tpufeed.ops.grain_transforms import grain_function
from tpufeed.ops.map import Map, MapWithIndex, RandomMap
from tpufeed.ops.pack import Pack
from tpufeed.ops.pack_fit import PackFit
from tpufeed.ops.padding import check_pad
from tpufeed.ops.registry import cache_stage
from tpufeed.ops.user_functions import check_callable

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["StageMethods"]


class StageMethods(Chain):
    """The element and stream stages: `tpufeed.Dataset` inherits them."""

    def map(self, fn: Callable[[Any], Any]) -> Self:
        """Applies `fn(element) -> element` to every element (in workers, with `.workers(n)`).
        A transform class is given constructed, `map(DecodeImage())`: the class is refused. A
        Grain `transforms.Map` object is called by its `map` method, as Grain calls it (and
        each stage below takes Grain's object of its own kind: tpufeed.ops.grain_transforms)."""
        return self._add(Map(_function(fn, "map")))

    def random_map(self, fn: Callable[[Any, Any], Any], seed: int | None = None) -> Self:
        """fn(element, rng) -> element; rng is a numpy Generator fixed by (seed, epoch, record)
        and, after a `flat_map`, by the piece of the record. `seed`: this stage's own (as
        Grain's `random_map(fn, seed=...)`); None: the pipeline's (its shuffle seed, or 0)."""
        stream = sum(isinstance(stage, RandomMap) for stage in self._stages)
        return self._add(RandomMap(_function(fn, "random_map"), stream, seed))

    def filter(self, fn: Callable[[Any], bool]) -> Self:
        """Keeps the elements for which fn(element) is true."""
        return self._add(Filter(_function(fn, "filter")))

    def map_with_index(self, fn: Callable[[int, Any], Any]) -> Self:
        """fn(index, element) -> element, as Grain's `map_with_index`: `index` is the record's
        place among the records each epoch reads (those a `slice` before it keeps), plus their
        count for each earlier epoch (as Grain's indices go on past the first epoch), the same
        whatever the shuffle after it, the workers or the hosts. It stands before `shuffle`
        (after one, Grain's index is the place in the shuffled order, which tpufeed does not
        give), `flat_map`, `cache`, `pack` and `batch`. A Grain `MapWithIndex` transform is
        called by its `map_with_index` method.

        >>> ds = Dataset.source(["a", "b", "c"]).skip(1).map_with_index(lambda i, x: (i, x))
        >>> list(ds.repeat(2)), sorted(ds.shuffle(seed=0))
        ([(0, 'b'), (1, 'c'), (2, 'b'), (3, 'c')], [(0, 'b'), (1, 'c')])
        """
        kept = self._slicing.kept(len(self._view("map_with_index")))
        function = _function(fn, "map_with_index")
        why = _no_index(self._seed, self._stages)
        if why:
            raise InvalidArgumentError(f"map_with_index({_name(fn)}) {why}")
        return self._add(MapWithIndex(function, kept.start, kept.step, len(kept)))

    def flat_map(self, fn: Callable[[Any], Any]) -> Self:
        """fn(element) -> an iterable of zero or more elements, delivered in order: the pieces
        of a long document, several crops of an image. A state taken between two pieces of one
        record resumes at the next piece.

        >>> ds = Dataset.from_sequence(["a b", "c"]).flat_map(str.split)
        >>> list(ds)
        ['a', 'b', 'c']
        """
        return self._add(FlatMap(_function(fn, "flat_map")))

    def cache(
        self, directory: str | None = None, max_bytes: int | None = None, key: str | None = None
    ) -> Self:
        """Stores each record's output of the stages so far in `directory` (at most `max_bytes`)
        and replays it in later epochs, keyed by the source's files and what the stages compute
        (their code and the values it reads), or by `key="v2"` instead (docs/images.md).
        tf.data's `cache()` (in memory, unbounded) is refused, naming both arguments."""
        why = memory_cache(directory, max_bytes)
        if why is not None:
            raise InvalidArgumentError(why)
        return self._add(cache_stage(directory, max_bytes, self._view("cache"), self._stages, key))

    def pack(
        self,
        lengths: dict[str, int],
        open_rows: int = 16,
        cut: bool = False,
        method: str = "first_fit",
    ) -> Self:
        """Packs sequences into rows of fixed length over `open_rows` open rows.

        Each key k of `lengths` gives `k`, `k_segment_ids` (1, 2, ... per sequence in the
        row, 0 on padding) and `k_positions` (restarting at every sequence); keys packed
        together (inputs and targets) share rows. A sequence longer than its row is split over
        rows (`cut=True` keeps only its first row's worth). With `batch(B)` after it, every step
        is `[B, length]`, the epoch's last batch filled with empty rows (`stats().padded_rows`).
        `method="first_fit"` puts each sequence in the first open row with room for it;
        `"best_fit"` in the one it leaves least room in, as Grain's `BestFitPackIterDataset`.
        When none has room, the fullest row is closed to open another.

        Over a dataset whose build recorded the key's lengths (`Dataset.open`), it logs the
        fill it expects and warns when `lengths` fits them poorly (`expected_fill`).

        >>> ds = Dataset.from_sequence([{"tokens": [5, 6, 7]}, {"tokens": [8, 9]}])
        >>> next(iter(ds.pack({"tokens": 4}).batch(2)))["tokens_segment_ids"].tolist()
        [[1, 1, 1, 0], [1, 1, 0, 0]]
        """
        packed = self._add(Pack(check_lengths(lengths, open_rows), open_rows, bool(cut), method))
        note_fit(packed)
        return packed

    def expected_fill(self) -> PackFit:
        """The fill `pack` is expected to reach (`.fill`: the share of the rows' room holding
        tokens, one epoch on one host) from the lengths the build recorded, and whether its
        row length fits them (`.advice`, `.better`: a nearby length that fills far better).

        It needs `pack` as the first stage over a dataset of `Dataset.open` whose build
        recorded the packed key's lengths (`Dataset.statistics`); otherwise it raises
        `InvalidArgumentError` saying why. See tpufeed.ops.pack_fit for how it is computed.
        """
        return expected_fit(self)

    def batch(
        self,
        batch_size: int,
        drop_remainder: bool = False,
        pad: dict[str, int | list[int]] | None = None,
        cut: bool = False,
    ) -> Self:
        """Stacks `batch_size` elements into numpy arrays (dicts, tuples and arrays nest).

        `pad={"tokens": 512}` pads a variable-length key to 512 along its first axis;
        `pad={"tokens": [128, 256, 512]}` to the smallest of those that fits the batch's
        longest. Each padded key gains `{key}_lengths` (int32, the true lengths). An element
        longer than the largest length raises, unless `cut=True`. Strings and other objects
        stack into object arrays; callables are refused (`BatchError`).

        >>> ds = Dataset.from_sequence([{"t": [1, 2]}, {"t": [3]}])
        >>> next(iter(ds.batch(2, pad={"t": [4, 8]})))["t"].tolist()
        [[1, 2, 0, 0], [3, 0, 0, 0]]
        """
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be a positive int, got {batch_size!r}")
        return self._add(Batch(batch_size, bool(drop_remainder), check_pad(pad), bool(cut)))


def _no_index(seed: int | None, stages: tuple[Any, ...]) -> str | None:
    """Why `map_with_index` cannot follow a pipeline of `seed` and `stages` (None: it can)."""
    if seed is not None:
        return (
            f"after shuffle(seed={seed}): Grain's index there is the place in the shuffled "
            "order, and tpufeed's is the record's; chain map_with_index before shuffle (the "
            "record's place, as Grain's there, in every epoch's order)"
        )
    split = next((s for s in stages if isinstance(s, FlatMap)), None)
    if split is not None:
        return (
            f"after {split.name}: its index is a record's place, and the elements of a "
            "flat_map are pieces of records; chain map_with_index before flat_map"
        )
    return None


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _function(fn: Any, stage: str) -> Any:
    """What `stage` calls: `fn`, or the method of a Grain transform object that Grain calls."""
    grain = grain_function(fn, stage)
    return grain if grain is not None else check_callable(fn, stage)
