"""`Dataset.mix([a, b, c], weights=[0.5, 0.3, 0.2], seed=0)`: several pipelines, one stream.

Each component is a whole pipeline (its own source, shuffle, epochs and record stages); the
mixture takes their elements in the exact proportions of the weights (tpufeed.schedule), and
the stages after `mix` (`pack`, `batch`) see the mixture. `on_end` says what happens when a
component ends: "restart" it with its next epoch (a fresh permutation; the default, so the
mixture never ends), "stop" the mixture, or "drop" it from the mix (the others keep their
relative weights).

The state is one cursor per component and the count taken from each (the schedule's state).
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.batching import take
from tpufeed.chunk import Chunk, ChunkRunner, EpochEnd, Piece
from tpufeed.cursor import Cursor, at_segment_start, resume_all
from tpufeed.errors import BatchError, InvalidArgumentError, StateError, TpufeedError
from tpufeed.plan import Plan
from tpufeed.schedule import next_components, phases
from tpufeed.stages import Batch, Pack, RecordStage
from tpufeed.state import STATE_VERSION, state_from_dict, state_to_dict
from tpufeed.stats import StageClock
from tpufeed.stream import Counters, ErrorBudget, stream
from tpufeed.walk import walk

ON_END = ("restart", "stop", "drop")
_ELEMENT_BLOCK = 64  # outputs mixed at once when the mixture does not batch


@dataclass(frozen=True)
class MixCursor:
    """Where a mixture stands: each component's cursor, the elements taken from each (the
    schedule's state), and which components are still mixed."""

    cursors: tuple[Cursor, ...]
    taken: tuple[int, ...]
    active: tuple[bool, ...]


@dataclass(frozen=True)
class MixPlan:
    """The runnable form of a mixture: its components' plans and the stages after `mix`.

    Quacks like a `Plan` where the stream and the stages after batch need one.
    """

    components: tuple[Plan, ...]
    labels: tuple[str, ...]  # names the components in errors and statistics
    weights: tuple[float, ...]
    seed: int
    on_end: str
    workers: tuple[int, ...]  # worker processes of each component (0: in this process)
    pack: Pack | None
    batch: Batch | None
    tail: tuple[RecordStage, ...]
    hosts: int
    host: int
    fingerprint: str
    head: tuple[RecordStage, ...] = ()
    max_errors: int = 0  # the components' own ignore_errors apply to their records
    epochs: int | None = None
    shuffle: None = None

    counts_depend_on_data = True  # components end (and restart) when their own data says
    fused = False
    record_key = 3  # ints that name a record in a state: component, epoch, epoch position

    @property
    def rng_seed(self) -> int:
        return self.seed

    @property
    def source(self) -> _Labels:
        return _Labels(self.labels)

    def state_of(self, cursor: MixCursor, stages: dict[str, Any] | None) -> dict[str, Any]:
        return mix_state(self, cursor, stages)

    def start(self) -> MixCursor:
        k = len(self.components)
        return MixCursor(tuple(Cursor(0, 0, p.hosts, p.host, 0) for p in self.components),
                         (0,) * k, (True,) * k)


class _Labels:
    """Names a mixture's elements in errors (records are the components')."""

    def __init__(self, labels: tuple[str, ...]):
        self.labels = labels

    def __len__(self) -> int:
        return 0

    def describe(self, record: int) -> str:
        return f"record {record} of a component of the mixture ({', '.join(self.labels)})"

    def path_of(self, record: int) -> str | None:
        return None


@dataclass(frozen=True)
class MixEnd:
    """The end of a mixture ("stop", or every component dropped)."""

    cursor: MixCursor
    epoch = 0

    def final_cursor(self) -> MixCursor:
        return self.cursor


class MixPiece:
    """Outputs of the mixture, in order: `order[i]` is the component of output i, taken from
    that component's pieces (`parts`). Quacks like `Piece` for the stream stages."""

    skipped: tuple = ()
    final = False
    epoch = 0

    def __init__(self, order: np.ndarray, parts: dict[int, list[tuple[Piece, int, int]]],
                 before: MixCursor, payload: Any):
        self.order, self.parts, self.before, self.payload = order, parts, before, payload
        self.size = len(order)

    def cursor_after(self, i: int) -> MixCursor:
        counts = np.bincount(self.order[:i + 1], minlength=len(self.before.taken))
        cursors = list(self.before.cursors)
        for component, count in enumerate(counts.tolist()):
            if count:
                piece, index = self._locate(component, count - 1)
                cursors[component] = piece.cursor_after(index)
        taken = tuple(t + c for t, c in zip(self.before.taken, counts.tolist()))
        return MixCursor(tuple(cursors), taken, self.before.active)

    def record_of(self, i: int) -> int:
        piece, index = self._element(i)
        return piece.record_of(index)

    def ref_of(self, i: int) -> tuple[int, ...]:
        """(component, epoch, epoch position, output of its record) of output i."""
        piece, index = self._element(i)
        return (int(self.order[i]), piece.epoch, *piece.ref_of(index))

    def _element(self, i: int) -> tuple[Piece, int]:
        component = int(self.order[i])
        return self._locate(component, int(np.count_nonzero(self.order[:i] == component)))

    def _locate(self, component: int, j: int) -> tuple[Piece, int]:
        for piece, lo, hi in self.parts[component]:
            if j < hi - lo:
                return piece, lo + j
            j -= hi - lo
        raise IndexError(j)


class ComponentFeed:
    """One component's pieces, handed out an element count at a time, in order."""

    def __init__(self, index: int, plan: MixPlan, cursor: Cursor, pieces: Iterator[Any],
                 counters: Counters):
        self.index, self.label = index, plan.labels[index]
        self.plan = plan.components[index]
        self.pieces = pieces
        self.budget = ErrorBudget(self.plan.max_errors, counters)
        self.slices: deque[tuple[Piece, int, int]] = deque()
        self.available = 0
        self.ended = False
        self.made_this_epoch = False

    def fill(self, n: int) -> int:
        """Reads pieces until `n` elements wait (or the component ends); how many wait."""
        while self.available < n and not self.ended:
            step = next(self.pieces, None)
            if step is None:
                self.ended = True
            elif isinstance(step, EpochEnd):
                if not self.made_this_epoch and at_segment_start(step.cursor) \
                        and step.cursor.base == 0 and self.plan.epochs is None:
                    raise TpufeedError(f"mixture component {self.label} made nothing in epoch "
                                       f"{step.cursor.epoch}, so restarting it would loop forever")
                self.made_this_epoch = False
            else:
                self.budget.charge(step.skipped)
                if step.size:
                    self.slices.append((step, 0, step.size))
                    self.available += step.size
                    self.made_this_epoch = True
        return min(n, self.available)

    def take(self, n: int) -> list[tuple[Piece, int, int]]:
        out = []
        while n:
            piece, lo, hi = self.slices[0]
            k = min(n, hi - lo)
            out.append((piece, lo, lo + k))
            if lo + k == hi:
                self.slices.popleft()
            else:
                self.slices[0] = (piece, lo + k, hi)
            n -= k
            self.available -= k
        return out


class MixedPieces:
    """The components' pieces, interleaved by the schedule into pieces of the mixture."""

    def __init__(self, plan: MixPlan, start: MixCursor, feeds: list[ComponentFeed]):
        self.plan, self.start, self.feeds = plan, start, feeds
        self.phase = phases(plan.seed, len(plan.components))
        self.stacked = plan.batch is not None and plan.pack is None
        self.block = plan.batch.batch_size if self.stacked else _ELEMENT_BLOCK

    def __iter__(self) -> Iterator[MixPiece | MixEnd]:
        cursor = self.start
        while any(cursor.active):
            order = next_components(cursor.taken, self.plan.weights, self.phase, cursor.active,
                                    self.block)
            wanted = np.bincount(order, minlength=len(self.feeds))
            short = [i for i, n in enumerate(wanted.tolist())
                     if n and self.feeds[i].fill(n) < n]
            if short:  # a component ended: mix up to its first missing output, then decide
                missing = {i: int(np.flatnonzero(order == i)[self.feeds[i].available]) for i in short}
                cut = min(missing.values())
                short = [i for i in short if missing[i] == cut]
                order = order[:cut]
            parts = {i: self.feeds[i].take(int(n))
                     for i, n in enumerate(np.bincount(order, minlength=len(self.feeds)).tolist())
                     if n}
            if len(order):
                piece = MixPiece(order, parts, cursor, self._payload(order, parts))
                cursor = piece.cursor_after(len(order) - 1)
                yield piece
            if short:
                if self.plan.on_end == "stop":
                    cursor = dataclasses.replace(cursor, active=(False,) * len(cursor.active))
                else:  # "drop" ("restart" components never end: their epochs repeat)
                    cursor = dataclasses.replace(cursor, active=tuple(
                        a and i not in short for i, a in enumerate(cursor.active)))
        yield MixEnd(cursor)

    def _payload(self, order: np.ndarray, parts: dict[int, list[tuple[Piece, int, int]]]) -> Any:
        if not self.stacked:
            out: list[Any] = [None] * len(order)
            for component, slices in parts.items():
                values = [v for piece, lo, hi in slices for v in piece.payload[lo:hi]]
                for slot, value in zip(np.flatnonzero(order == component).tolist(), values):
                    out[slot] = value
            return out
        rows = {c: [take(p.payload, lo, hi) for p, lo, hi in slices] for c, slices in parts.items()}
        return self._scatter(order, rows)

    def _scatter(self, order: np.ndarray, rows: dict[int, list[Any]]) -> Any:
        """One stacked batch whose row i is the next row of component order[i]."""
        from tpufeed.batching import concat, flatten, unflatten

        first = min(rows)
        treedef, leaves = flatten(rows[first][0])
        outs = [np.empty((len(order), *np.shape(leaf)[1:]), np.asarray(leaf).dtype)
                for leaf in leaves]
        for component, parts in rows.items():
            their_def, their = flatten(concat(parts))
            mismatch = their_def != treedef or any(
                np.shape(a)[1:] != o.shape[1:] or np.asarray(a).dtype != o.dtype
                for a, o in zip(their, outs))
            if mismatch:
                raise BatchError(
                    f"mixture components {self.plan.labels[first]} and "
                    f"{self.plan.labels[component]} make elements that do not batch together: "
                    f"{_describe(leaves)} against {_describe(their)}; make them alike in each "
                    "component's map")
            slots = np.flatnonzero(order == component)
            for out, leaf in zip(outs, their):
                out[slots] = leaf
        return unflatten(treedef, outs)


def _describe(leaves: list[Any]) -> str:
    return ", ".join(f"{np.asarray(leaf).dtype}{list(np.shape(leaf)[1:])}" for leaf in leaves)


@dataclass
class MixProducer:
    """Runs a mixture in this process (components with workers run their chunks in them);
    `items()` yields (item, MixCursor after it, stream stages' state then)."""

    plan: MixPlan
    cursor: MixCursor
    counters: Counters
    clock: StageClock
    stages: dict[str, Any] | None = None

    def items(self) -> Iterator[tuple[Any, MixCursor, dict[str, Any] | None]]:
        sources, pools = [], []
        try:
            for i, (plan, cursor) in enumerate(zip(self.plan.components, self.cursor.cursors)):
                workers = self.plan.workers[i]
                if workers:
                    from tpufeed.workers.engine import ParallelProducer
                    parallel = ParallelProducer(plan, cursor, workers, 0, self.counters, self.clock)
                    pools.append(parallel.start())
                    sources.append(parallel.pieces(pools[-1]))
                else:
                    sources.append(_pieces_here(plan, cursor, self.clock))
            feeds = [ComponentFeed(i, self.plan, c, s, self.counters)
                     for i, (c, s) in enumerate(zip(self.cursor.cursors, sources))]
            yield from stream(self.plan, iter(MixedPieces(self.plan, self.cursor, feeds)),
                              self.counters, self.clock, self.cursor, self.stages, self.reread)
        finally:
            for pool in pools:
                pool.close()

    def reread(self, records: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[Any]]:
        """Every output of the (component, epoch, position) records, read again."""
        found: dict[tuple[int, ...], list[Any]] = {}
        groups: dict[tuple[int, int], list[int]] = {}
        for component, epoch, position in records:
            groups.setdefault((component, epoch), []).append(position)
        for (component, epoch), positions in groups.items():
            runner = ChunkRunner(self.plan.components[component], self.clock)
            for position, outs in runner.outputs(epoch, positions).items():
                found[(component, epoch, position)] = outs
        return found


def _pieces_here(plan: Plan, cursor: Cursor, clock: StageClock) -> Iterator[Piece | EpochEnd]:
    runner = ChunkRunner(plan, clock)
    for step in walk(plan, cursor):
        yield runner.run_chunk(step) if isinstance(step, Chunk) else step


def component_plan(plan: Plan, mixture_batch: Batch | None, restart: bool) -> Plan:
    """A component as the mixture runs it: its survivors stacked into pieces when the mixture
    batches (so workers stack them), never finished into batches of its own."""
    batch = (Batch(mixture_batch.batch_size, False, mixture_batch.pad, mixture_batch.cut)
             if mixture_batch is not None else None)
    return dataclasses.replace(plan, batch=batch, tail=(), pieces_only=True,
                               epochs=None if restart else plan.epochs)



def mix_state(plan: MixPlan, cursor: MixCursor, stages: dict[str, Any] | None) -> dict[str, Any]:
    """The iterator state of a mixture: each component's cursor and the schedule's counts."""
    components = []
    for component, c in zip(plan.components, cursor.cursors):
        state = state_to_dict(c, component.fingerprint)
        del state["version"]
        components.append(state)
    state = {"version": STATE_VERSION, "fingerprint": plan.fingerprint,
             "mix": {"taken": list(cursor.taken), "active": [int(a) for a in cursor.active],
                     "components": components}}
    if stages:
        state.update(stages)
    return state


def mix_cursor(state: Any, plan: MixPlan) -> MixCursor:
    """The cursor of a mixture's state (validated against `plan`)."""
    if isinstance(state, (str, bytes)):
        state = json.loads(state)
    state_from_dict({**state, "hosts": 1, "host": 0, **{k: 0 for k in ("epoch", "base", "consumed")}},
                    plan.fingerprint)  # version and fingerprint
    mix = state.get("mix")
    k = len(plan.components)
    if not (isinstance(mix, dict) and isinstance(mix.get("components"), list)
            and len(mix["components"]) == k and isinstance(mix.get("taken"), list)
            and len(mix["taken"]) == k and isinstance(mix.get("active"), list)
            and len(mix["active"]) == k):
        raise StateError(f"iterator state of a mixture of {k} components needs 'mix' with "
                         f"'components', 'taken' and 'active' of {k} each; got {mix!r}")
    cursors = tuple(state_from_dict({"version": state["version"], **c}, p.fingerprint)
                    for c, p in zip(mix["components"], plan.components))
    taken = tuple(t if isinstance(t, int) and not isinstance(t, bool) and t >= 0 else -1
                  for t in mix["taken"])
    if -1 in taken or not all(a in (0, 1) for a in mix["active"]):
        raise StateError(f"iterator state field mix has bad counts {mix['taken']!r} or flags "
                         f"{mix['active']!r}")
    return MixCursor(cursors, taken, tuple(bool(a) for a in mix["active"]))


def resume_mix(plan: MixPlan, saved: list[MixCursor], n: list[int]) -> MixCursor:
    """Host `plan.host` of `plan.hosts` continuing from all hosts' mixture cursors: each
    component exactly once per its epoch (the schedule restarts its counts)."""
    k = len(plan.components)
    cursors = tuple(resume_all([s.cursors[i] for s in saved], n[i], plan.hosts, plan.host)
                    for i in range(k))
    active = tuple(any(s.active[i] for s in saved) for i in range(k))
    return MixCursor(cursors, (0,) * k, active)


@dataclass(frozen=True)
class Mixture:
    """What `Dataset.mix` was given (each component a `Dataset` without batch or pack)."""

    datasets: tuple[Any, ...]
    weights: tuple[float, ...]
    seed: int
    on_end: str

    def plan(self, host: int, hosts: int, workers: int, stages: tuple[Any, ...],
             fingerprint: str) -> MixPlan:
        """The runnable mixture for host `host` of `hosts`; `workers` are shared out over the
        components by weight (a component's own `.workers(n)` wins)."""
        pack = next((s for s in stages if isinstance(s, Pack)), None)
        batch = next((s for s in stages if isinstance(s, Batch)), None)
        stream = [stages.index(s) for s in (pack, batch) if s is not None]
        if (stream[0] if stream else len(stages)) != 0:
            raise InvalidArgumentError(
                "after mix come pack and batch (and stages on their items); put per-element "
                "stages (map, filter, ...) in the components, before mix")
        components, labels, shares = [], [], []
        for i, (ds, weight) in enumerate(zip(self.datasets, self.weights)):
            plan = ds.shard(host, hosts)._plan()
            components.append(component_plan(plan, batch if pack is None else None,
                                             restart=self.on_end == "restart"))
            labels.append(f"#{i} {ds.source!r}"[:80])
            own = ds._workers  # noqa: SLF001 - the mixture runs its components
            shares.append(own if own else (max(1, round(workers * weight)) if workers else 0))
        return MixPlan(tuple(components), tuple(labels), self.weights, self.seed, self.on_end,
                       tuple(shares), pack, batch, tuple(stages[(stream[-1] + 1) if stream else 0:]),
                       hosts, host, fingerprint)

    def describe(self) -> Any:
        return {"mix": [ds.fingerprint() for ds in self.datasets], "weights": list(self.weights),
                "seed": self.seed, "on_end": self.on_end}


def check_mix(datasets: Any, weights: Any, seed: Any, on_end: Any) -> tuple[tuple[float, ...], str]:
    """Validated weights (summing to 1) for `datasets`; raises naming the bad value."""
    if not isinstance(datasets, (list, tuple)) or not datasets:
        raise InvalidArgumentError(f"mix needs a non-empty list of datasets, got {datasets!r}")
    if weights is None:
        weights = [1.0] * len(datasets)
    if not isinstance(weights, (list, tuple)) or len(weights) != len(datasets):
        raise InvalidArgumentError(f"mix needs one weight per dataset ({len(datasets)}), got "
                                   f"{weights!r}")
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w) or w <= 0:
            raise InvalidArgumentError(f"mix weights must be positive numbers, got {weights!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidArgumentError(f"mix seed must be an int, got {seed!r}")
    if on_end not in ON_END:
        raise InvalidArgumentError(f"mix on_end must be one of {ON_END}, got {on_end!r}")
    total = float(sum(weights))
    return tuple(float(w) / total for w in weights), on_end
