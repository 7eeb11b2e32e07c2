"""Which records each epoch reads, in what order and on which host: `shuffle`, `shard`,
`repeat`, settings of the whole pipeline, and `slice`, `take`, `skip`, which cut each epoch
(tpufeed.order.slicing)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from tpufeed.chain.base import Chain
from tpufeed.chain.tf_data import swapped_shard
from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.batch import Batch
from tpufeed.ops.pack import Pack
from tpufeed.ops.registry import stage_label
from tpufeed.order.sharding import Sharding
from tpufeed.order.slicing import check_cut

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["OrderMethods"]


class OrderMethods(Chain):
    """`shuffle`, `shard` and `repeat`: `tpufeed.Dataset` inherits them."""

    def shuffle(self, seed: int, window: int | None = None) -> Self:
        """A fresh permutation of the records each epoch, keyed by `seed`.

        `window=None`: global. `window=K` (file sources): shuffle the shard order, then the
        records within each group of K consecutive shards, so only about K shards are needed at
        once — for datasets larger than the local cache.
        """
        check_shuffle(seed, window, self._view("shuffle").source)
        if self._seed is not None:
            raise InvalidArgumentError(f"shuffle is already set (seed {self._seed})")
        return self._replace(_seed=seed, _window=window)

    def shard(
        self, index: int | None = None, count: int | None = None, num_shards: int | None = None
    ) -> Self:
        """This host's share; defaults to the run's process index/count (jax's or torch's).
        `num_shards` is tf.data's name for `count`: `shard(num_shards=4, index=1)` is
        `shard(1, 4)` (positionally, tf.data's order is the other way round)."""
        if num_shards is not None:
            if count is not None:
                raise InvalidArgumentError(
                    f"shard got count={count!r} and num_shards={num_shards!r}: they name the "
                    "same thing (num_shards is tf.data's word); give one"
                )
            count = num_shards
        if type(index) is int and type(count) is int and 0 < count <= index:
            raise InvalidArgumentError(swapped_shard(index, count))
        return self._replace(_sharding=Sharding(index, count))

    def slice(self, cut: builtins.slice) -> Self:
        """The records that `cut` selects of each epoch, as Grain's `ds.slice(slice(a, b, c))`
        (and `ds[a:b:c]`).

        Chained before `shuffle`, it selects records: each epoch is those records, shuffled
        among themselves. After `shuffle`, it selects places of each epoch's shuffled order: a
        fresh choice of records every epoch, as `shuffle().take(n)` gives in tf.data. Either
        way it counts records, before any filter (as Grain's `MapDataset.slice` does), so it
        stands before `filter`, `flat_map`, `pack`, `batch` and `repeat`. The hosts share the
        sliced epoch, exactly once, and a state resumes in it exactly.

        >>> list(Dataset.from_sequence(range(10)).slice(slice(2, 8, 2)))
        [2, 4, 6]
        """
        return self._cut(check_cut(cut, "slice"), "slice")

    def take(self, count: int) -> Self:
        """The first `count` records of each epoch: `slice(slice(0, count))` (-1: all of them,
        as tf.data's `take(-1)`). To stop after `count` items of a pipeline that filters or
        batches, `itertools.islice(ds, count)`."""
        return self._cut(slice(0, None if _count(count, "take") == -1 else count), "take")

    def skip(self, count: int) -> Self:
        """Each epoch without its first `count` records: `slice(slice(count, None))` (-1: all
        of them skipped, as tf.data's `skip(-1)`)."""
        cut = slice(0, 0) if _count(count, "skip") == -1 else slice(count, None)
        return self._cut(cut, "skip")

    def _cut(self, cut: builtins.slice, what: str) -> Self:
        n = len(self._view(what))
        if self._epochs != 1:
            raise InvalidArgumentError(
                f"{what} counts the records of each epoch, and repeat() is set already: call "
                f"{what} before repeat (each epoch is cut), or stop after a number of items "
                "with itertools.islice(ds, n)"
            )
        for stage in self._stages:
            if isinstance(stage, (Batch, Pack)) or stage.changes_count:
                raise InvalidArgumentError(
                    f"{what} counts records (before any filter, as Grain's MapDataset.slice), "
                    f"so it stands before {stage_label(stage)}: move it there, or stop after "
                    "a number of items with itertools.islice(ds, n)"
                )
        shuffled = self._seed is not None
        return self._replace(_slicing=self._slicing.sliced(cut, n, shuffled))

    def repeat(self, epochs: int | None = None) -> Self:
        """Runs `epochs` epochs (None: forever), each a new permutation when shuffled."""
        self._not_mixture("repeat")
        check_epochs(epochs)
        return self._replace(_epochs=epochs)


def check_epochs(epochs: Any) -> None:
    """Raises unless `epochs` can be a plan's epoch count (None: forever)."""
    if epochs is not None and (
        not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0
    ):
        raise InvalidArgumentError(f"epochs must be None or a non-negative int, got {epochs!r}")


def check_shuffle(seed: Any, window: Any, source: Any) -> None:
    """Raises unless `seed` and `window` can shuffle `source` (a window needs shards)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidArgumentError(f"shuffle seed must be an int, got {seed!r}")
    if window is not None and (
        not isinstance(window, int) or isinstance(window, bool) or window < 1
    ):
        raise InvalidArgumentError(f"shuffle window must be None or a positive int, got {window!r}")
    if window is not None and not hasattr(source, "shard_starts"):
        raise InvalidArgumentError(
            f"shuffle(window={window}) needs a source of several files (ArrayRecord, TFRecord, "
            f"Dataset.open); {type(source).__name__} has no shards"
        )


def _count(count: Any, what: str) -> int:
    if not isinstance(count, int) or isinstance(count, bool) or count < -1:
        raise InvalidArgumentError(
            f"{what} takes a number of records >= 0 (or -1, as tf.data's), got {count!r}"
        )
    return count
