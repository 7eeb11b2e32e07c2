"""Which records each epoch reads, in what order and on which host: `shuffle`, `shard` and
`repeat`, settings of the whole pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpufeed.chain.base import Chain
from tpufeed.chain.tf_data import swapped_shard
from tpufeed.errors import InvalidArgumentError
from tpufeed.order.sharding import Sharding
from tpufeed.run.plan import check_epochs, check_shuffle

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

    def repeat(self, epochs: int | None = None) -> Self:
        """Runs `epochs` epochs (None: forever), each a new permutation when shuffled."""
        self._not_mixture("repeat")
        check_epochs(epochs)
        return self._replace(_epochs=epochs)
