"""Dataset: an immutable, chainable description of an input pipeline.

>>> ds = (Dataset.from_sequence(range(100)).shuffle(seed=0).shard(0, 2)
...       .map(lambda x: {"x": x}).batch(8).repeat(2))
>>> it = iter(ds); batch = next(it); state = it.get_state()
>>> next(ds.iterator(state))["x"].tolist() == next(it)["x"].tolist()
True
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tpufeed.autotune import AUTO, Options, choose
from tpufeed.cursor import Cursor, check_in_range, epoch_start, resume_all, resume_one
from tpufeed.errors import InvalidArgumentError, StateError, TpufeedError
from tpufeed.iterator import DatasetIterator
from tpufeed.order import Shuffle
from tpufeed.plan import Plan
from tpufeed.sources.view import SourceView
from tpufeed.stages import Batch, Filter, FlatMap, Map, RandomMap, Stage
from tpufeed.state import fingerprint, state_from_dict, states_from_list
from tpufeed.storage.local import PathsLike
from tpufeed.uneven import EvenHosts, HostAgreement, JaxAgreement, check_uneven, counts_are_even


@dataclass(frozen=True)
class Sharding:
    """Which share of every epoch this host reads; None means "ask jax when iterating"."""

    index: int | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        for name in ("index", "count"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidArgumentError(f"shard {name} must be an int, got {value!r}")
        if self.count is not None and self.count < 1:
            raise InvalidArgumentError(f"shard count must be >= 1, got {self.count}")
        if self.index is not None and self.index < 0:
            raise InvalidArgumentError(f"shard index must be >= 0, got {self.index}")
        if self.index is not None and self.count is not None and self.index >= self.count:
            raise InvalidArgumentError(f"shard index {self.index} is not below shard count {self.count}")

    def resolve(self) -> tuple[int, int]:
        """(index, count), the missing parts from jax.process_index()/process_count()."""
        index, count = self.index, self.count
        if index is None or count is None:
            jax_index, jax_count = _jax_process()
            index = jax_index if index is None else index
            count = jax_count if count is None else count
        if index >= count:
            raise InvalidArgumentError(f"shard index {index} is not below shard count {count}")
        return index, count


def _jax_process() -> tuple[int, int]:
    try:
        import jax
    except ImportError:
        return 0, 1
    return jax.process_index(), jax.process_count()


@dataclass(frozen=True)
class Dataset:
    """A pipeline: source -> shuffle -> shard -> map/random_map/filter/flat_map -> batch -> repeat.

    Every method returns a new Dataset. Shuffle, shard, repeat and prefetch are settings of the
    whole pipeline; map, random_map, filter, flat_map and batch run in the order they were
    chained (stages after `batch` see whole batches). Batches never span epochs.
    """

    _source: SourceView
    _seed: int | None = None
    _window: int | None = None
    _sharding: Sharding = Sharding(0, 1)
    _stages: tuple[Stage, ...] = ()
    _epochs: int | None = 1
    _prefetch: int | str = 0
    _workers: int | str = 0
    _max_errors: int = 0
    _options: Options = Options()

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def from_source(cls, source: Any) -> Dataset:
        """Any object with `__len__` and `__getitem__(int)` (a Grain data source works as is)."""
        return cls(SourceView(source))

    @classmethod
    def from_sequence(cls, items: Sequence[Any]) -> Dataset:
        from tpufeed.sources.memory import SequenceSource
        return cls(SourceView(SequenceSource(items)))

    @classmethod
    def from_array_record(cls, paths: PathsLike, cache_dir: str | os.PathLike | None = None,
                          cache_bytes: int | None = None) -> Dataset:
        """Records (bytes) of ArrayRecord files: a path, a glob, or a list of them, local or
        gs://. gs:// shards go through the local shard cache (`cache_dir`, default
        $TPUFEED_CACHE_DIR else ~/.cache/tpufeed; `cache_bytes`, default 80% of free space)."""
        from tpufeed.sources.array_record import ArrayRecordSource
        return cls(SourceView(ArrayRecordSource(paths, cache=_cache(cache_dir, cache_bytes))))

    @classmethod
    def from_tfrecord(cls, paths: PathsLike, index_dir: str | os.PathLike | None = None,
                      cache_dir: str | os.PathLike | None = None,
                      cache_bytes: int | None = None) -> Dataset:
        """Records (bytes) of TFRecord files, randomly accessible through an offset index;
        gs:// files through the shard cache, or with `cache_bytes=0` as ranged GETs."""
        from tpufeed.sources.tfrecord import TFRecordSource
        return cls(SourceView(TFRecordSource(paths, index_dir=index_dir,
                                             cache=_cache(cache_dir, cache_bytes))))

    @classmethod
    def open(cls, path: str | os.PathLike, verify: bool = False,
             cache_dir: str | os.PathLike | None = None,
             cache_bytes: int | None = None) -> Dataset:
        """A dataset built by `tpufeed build` / `tpufeed.beam.WriteShards`: a folder or its
        manifest.json, local or gs://. Shard sizes, CRC32C and counts are checked on a shard's
        first read, or all at once with `verify=True` (gs:// shards by their object metadata,
        downloading nothing); elements are the decoded records. gs:// shards go through the
        shard cache, as in `from_array_record` (`cache_dir`, `cache_bytes`; unused locally).

        >>> ds = Dataset.open("gs://bucket/train", cache_dir="/mnt/ssd/tpufeed")  # doctest: +SKIP
        """
        from tpufeed.sources.manifest import ManifestSource
        return cls(SourceView(ManifestSource(path, verify=verify,
                                             cache=_cache(cache_dir, cache_bytes))))

    @property
    def schema(self) -> dict[str, Any] | None:
        """The manifest's inferred schema for datasets from `Dataset.open`, else None."""
        return getattr(self._source.source, "schema", None)

    # -- settings -----------------------------------------------------------------------------

    @property
    def source(self) -> Any:
        """The record source underneath (`__len__`, `__getitem__`): usable as a Grain source."""
        return self._source.source

    def shuffle(self, seed: int, window: int | None = None) -> Dataset:
        """A fresh permutation of the records each epoch, keyed by `seed`.

        `window=None`: global. `window=K` (file sources): shuffle the shard order, then the
        records within each group of K consecutive shards, so only about K shards are needed at
        once — for datasets larger than the local cache.
        """
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise InvalidArgumentError(f"shuffle seed must be an int, got {seed!r}")
        if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise InvalidArgumentError(f"shuffle window must be None or a positive int, got {window!r}")
        if window is not None and not hasattr(self._source.source, "shard_starts"):
            raise InvalidArgumentError(
                f"shuffle(window={window}) needs a source of several files (ArrayRecord, TFRecord, "
                f"Dataset.open); {type(self._source.source).__name__} has no shards")
        if self._seed is not None:
            raise InvalidArgumentError(f"shuffle is already set (seed {self._seed})")
        return dataclasses.replace(self, _seed=seed, _window=window)

    def shard(self, index: int | None = None, count: int | None = None) -> Dataset:
        """This host's share of each epoch; defaults to jax.process_index()/process_count()."""
        return dataclasses.replace(self, _sharding=Sharding(index, count))

    def map(self, fn: Callable[[Any], Any]) -> Dataset:
        """fn(element) -> element."""
        return self._add(Map(_callable(fn, "map")))

    def random_map(self, fn: Callable[[Any, Any], Any]) -> Dataset:
        """fn(element, rng) -> element; rng is a numpy Generator fixed by (seed, epoch, record)
        and, after a `flat_map`, by the piece of the record."""
        stream = sum(isinstance(stage, RandomMap) for stage in self._stages)
        return self._add(RandomMap(_callable(fn, "random_map"), stream))

    def filter(self, fn: Callable[[Any], bool]) -> Dataset:
        """Keeps the elements for which fn(element) is true."""
        return self._add(Filter(_callable(fn, "filter")))

    def flat_map(self, fn: Callable[[Any], Any]) -> Dataset:
        """fn(element) -> an iterable of zero or more elements, delivered in order: the pieces
        of a long document, several crops of an image. A state taken between two pieces of one
        record resumes at the next piece.

        >>> ds = Dataset.from_sequence(["a b", "c"]).flat_map(str.split)
        >>> list(ds)
        ['a', 'b', 'c']
        """
        if self._batch() is not None:
            raise InvalidArgumentError("flat_map must come before batch: it makes elements, "
                                       "and a batch is cut from elements")
        return self._add(FlatMap(_callable(fn, "flat_map")))

    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """Stacks `batch_size` elements into numpy arrays (dicts, tuples and arrays nest)."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be a positive int, got {batch_size!r}")
        if self._batch() is not None:
            raise InvalidArgumentError("batch is already set; a pipeline batches once")
        return self._add(Batch(batch_size, bool(drop_remainder)))

    def repeat(self, epochs: int | None = None) -> Dataset:
        """Runs `epochs` epochs (None: forever), each a new permutation when shuffled."""
        if epochs is not None and (not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0):
            raise InvalidArgumentError(f"epochs must be None or a non-negative int, got {epochs!r}")
        return dataclasses.replace(self, _epochs=epochs)

    def prefetch(self, n: int | str) -> Dataset:
        """Keeps up to `n` items ready ahead of the consumer (0: produce on demand).

        `"auto"`: chosen from a short warm-up within the RAM budget, and deepened while the
        consumer keeps waiting.
        """
        if n != AUTO and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise InvalidArgumentError(f"prefetch must be a non-negative int or 'auto', got {n!r}")
        return dataclasses.replace(self, _prefetch=n)

    def options(self, ram_budget_bytes: int | None = None) -> Dataset:
        """Pipeline-wide settings; `ram_budget_bytes` bounds what "auto" settings may use."""
        return dataclasses.replace(self, _options=Options(ram_budget_bytes=ram_budget_bytes))

    def ignore_errors(self, max_errors: int) -> Dataset:
        """Skips records whose read or transform fails, at most `max_errors` per iterator.

        Each skip is counted (`it.stats().errors`) and logged with its file, record and cause;
        the bad record after the last allowed one raises. Off by default: errors raise.
        """
        if not isinstance(max_errors, int) or isinstance(max_errors, bool) or max_errors < 0:
            raise InvalidArgumentError(f"max_errors must be a non-negative int, got {max_errors!r}")
        return dataclasses.replace(self, _max_errors=max_errors)

    def workers(self, n: int | str) -> Dataset:
        """Runs the element and batch stages in `n` worker processes (0: in this process).

        The output is the same item for item whatever `n`; functions may be lambdas or closures.
        `"auto"`: chosen from a short measured warm-up within the RAM budget (`options`).
        """
        if n != AUTO and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise InvalidArgumentError(f"workers must be a non-negative int or 'auto', got {n!r}")
        return dataclasses.replace(self, _workers=n)

    # -- running ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self.iterator()

    def iterator(self, state: Any = None, uneven: str | None = None,
                 agreement: HostAgreement | None = None) -> Any:
        """A new iterator, from the start or resuming right after `state` was taken.

        `state` is one `get_state()`, or the list of every host's, taken at one step of a run.
        One state continues on the host that took it, and on any host of a run whose hosts
        were in lockstep (counts that cannot depend on the data). The list of all hosts'
        states continues on any host count, exactly once, whatever the stages.

        `uneven="shortest"` or `"pad"` ends every host's epochs at the same step when hosts
        make different numbers of batches (tpufeed.uneven), agreeing through `agreement`
        (default: the coordination service of `jax.distributed`). `to_jax` does this itself.
        """
        plan = self._plan()
        n = len(plan.source)
        if state is None:
            cursor = epoch_start(0, plan.hosts, plan.host)
        elif isinstance(state, (list, tuple)):
            saved = [check_in_range(c, n) for c in states_from_list(state, plan.fingerprint)]
            cursor = resume_all(saved, n, plan.hosts, plan.host)
        else:
            saved_one = check_in_range(state_from_dict(state, plan.fingerprint), n)
            cursor = resume_one(saved_one, n, plan.hosts, plan.host, plan.counts_depend_on_data)
        if plan.epochs is not None and cursor.epoch >= max(1, plan.epochs):
            raise StateError(f"iterator state is in epoch {cursor.epoch}, but this pipeline runs "
                             f"{plan.epochs} epoch(s): it comes from a run with more epochs")
        if check_uneven(uneven) is None:
            return self._iterate(plan, cursor)
        if uneven == "pad" and plan.batch is None:
            raise InvalidArgumentError("uneven='pad' needs a pipeline with batch(): padding "
                                       "fills whole batches")
        even = counts_are_even(plan, cursor)
        if even and uneven == "shortest":
            return self._iterate(plan, cursor)
        if not even and agreement is None:
            agreement = JaxAgreement(plan.fingerprint, hosts=plan.hosts)
        inner = self._iterate(plan, cursor)
        return EvenHosts(inner, uneven, None if even else agreement, plan.hosts,
                         plan.batch.batch_size if plan.batch is not None else None,
                         self._first_item)

    def _iterate(self, plan: Plan, cursor: Cursor) -> DatasetIterator:
        if AUTO in (self._workers, self._prefetch):
            tuning = choose(plan, cursor, self._workers, self._prefetch, self._options)
            return DatasetIterator(plan, cursor, prefetch=tuning.prefetch, workers=tuning.workers,
                                   tuning=tuning, adapt_prefetch=self._prefetch == AUTO)
        return DatasetIterator(plan, cursor, prefetch=self._prefetch, workers=self._workers)

    def to_jax(self, sharding: Any = None, prefetch: int = 2, state: Any = None,
               uneven: str = "shortest", agreement: HostAgreement | None = None) -> Any:
        """Iterates pytrees of global `jax.Array`s placed by `sharding`, `prefetch` ahead on
        device, from the start or right after `state` (one `get_state()`, or every process's).
        Every process ends each epoch at the same step (`uneven`: "shortest" or "pad")."""
        from tpufeed.adapters.jax import to_jax
        return to_jax(self, sharding=sharding, prefetch=prefetch, state=state, uneven=uneven,
                      agreement=agreement)

    def to_tf(self, state: dict[str, Any] | None = None) -> Any:
        """A `tf.data.Dataset` over this pipeline, with its `element_spec` from the first batch."""
        from tpufeed.adapters.tf import to_tf
        return to_tf(self, state=state)

    def to_torch(self, pin_memory: bool = False) -> Any:
        """A `torch.utils.data.IterableDataset` yielding torch tensors."""
        from tpufeed.adapters.torch import to_torch
        return to_torch(self, pin_memory=pin_memory)

    def fingerprint(self) -> str:
        """Identifies source, shuffle seed and stages; states only restore into a match."""
        return fingerprint({"source": self._source.fingerprint(), "seed": self._seed,
                            "window": self._window,
                            "ops": [stage.describe() for stage in self._stages]})

    def _shuffle(self) -> Shuffle | None:
        if self._seed is None:
            return None
        if self._window is None:
            return Shuffle(self._seed)
        return Shuffle(self._seed, self._window, self._source.source.shard_starts)

    def _first_item(self) -> Any:
        """The first item of a one-host pass: what a host that made nothing pads from."""
        one = dataclasses.replace(self, _sharding=Sharding(0, 1), _epochs=1, _workers=0,
                                  _prefetch=0)
        with one.iterator() as it:
            for item in it:
                return item
        raise TpufeedError(f"the pipeline makes no item at all, so there is nothing to pad "
                           f"from: {self!r}")

    def _batch(self) -> Batch | None:
        return next((stage for stage in self._stages if isinstance(stage, Batch)), None)

    def _plan(self) -> Plan:
        host, hosts = self._sharding.resolve()
        stages = list(self._stages)
        batch = self._batch()
        split = stages.index(batch) if batch is not None else len(stages)
        return Plan(
            source=self._source,
            shuffle=self._shuffle(),
            rng_seed=self._seed if self._seed is not None else 0,
            head=tuple(stages[:split]),  # type: ignore[arg-type]
            batch=batch,
            tail=tuple(stages[split + 1:]),  # type: ignore[arg-type]
            epochs=self._epochs,
            hosts=hosts,
            host=host,
            fingerprint=self.fingerprint(),
            max_errors=self._max_errors,
        )

    def _add(self, stage: Stage) -> Dataset:
        return dataclasses.replace(self, _stages=self._stages + (stage,))

    def __repr__(self) -> str:
        stages = ", ".join(f"batch({stage.batch_size}, drop_remainder={stage.drop_remainder})"
                           if isinstance(stage, Batch) else stage.name for stage in self._stages)
        return (f"Dataset({self._source.source!r}, seed={self._seed}, window={self._window}, shard={self._sharding}, "
                f"stages=[{stages}], epochs={self._epochs}, prefetch={self._prefetch}, "
                f"workers={self._workers})")


def _cache(cache_dir: str | os.PathLike | None, cache_bytes: int | None) -> Any:
    """A ShardCache when the caller set one up; None lets gs:// sources make the default."""
    if cache_dir is None and cache_bytes is None:
        return None
    from tpufeed.storage.cache import ShardCache
    return ShardCache(cache_dir, cache_bytes)


def _callable(fn: Any, stage: str) -> Any:
    if not callable(fn):
        raise InvalidArgumentError(f"{stage} needs a callable, got {fn!r}")
    return fn
