"""Mixtures: what `Dataset.mix` was given, and the executor that runs one.

Each component runs its chunks where its own settings say (its own worker pool, or this
process); `ComponentFeed`s take each component's pieces in order and `MixedPieces`
(tpufeed.ops.mix) interleaves them by the schedule into the pieces of the mixture, which the
run streams like any other.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from tpufeed.errors import InvalidArgumentError, TpufeedError
from tpufeed.ops.base import Counters, End, Piece, PieceLike, Reread, StageClock
from tpufeed.ops.batch import Batch
from tpufeed.ops.mix import ON_END, Mix, MixedPieces, Slices
from tpufeed.ops.pack import Pack
from tpufeed.ops.registry import Stage, split
from tpufeed.order.cursor import MixCursor
from tpufeed.order.state import weighed_fingerprint
from tpufeed.run.autotune import AUTO, Options
from tpufeed.run.chunks import ChunkRunner
from tpufeed.run.executor import Executor, InProcessExecutor
from tpufeed.run.plan import MixPlan, StreamPlan, component_plan
from tpufeed.run.stats import WorkerStats
from tpufeed.run.stream import ErrorBudget
from tpufeed.run.workers.init_hook import NO_MIXTURE_INIT
from tpufeed.run.workers.liveness import STOPPED_S


class ComponentSettings(Protocol):
    """What `check_component` reads of a component's `RunSettings` (tpufeed.run.launch, which
    imports this module)."""

    @property
    def workers(self) -> int | str: ...
    @property
    def prefetch(self) -> int | str: ...
    @property
    def options(self) -> Options: ...


@dataclass(frozen=True)
class Mixture:
    """What `Dataset.mix` was given (each component a `Dataset` without batch or pack)."""

    datasets: tuple[Any, ...]
    weights: tuple[float, ...]
    seed: int
    on_end: str

    def plan(
        self, host: int, hosts: int, workers: int | str, stages: tuple[Stage, ...], fingerprint: str
    ) -> MixPlan:
        """The runnable mixture for host `host` of `hosts`; `workers` are shared out over the
        components by weight (a component's own `.workers(n)` wins; "auto" shares none out:
        a mixture refuses it when it runs)."""
        workers = workers if isinstance(workers, int) else 0
        head, pack, batch, tail = split(stages)
        if head:
            raise InvalidArgumentError(
                "after mix come pack and batch (and stages on their items); put per-element "
                "stages (map, filter, ...) in the components, before mix"
            )
        components, labels, shares = [], [], []
        for i, (ds, weight) in enumerate(zip(self.datasets, self.weights)):
            plan = ds.shard(host, hosts)._plan()
            own = ds._settings.workers
            if ds._settings.worker_init is not None:
                raise InvalidArgumentError(NO_MIXTURE_INIT)
            shares.append(own if own else (max(1, round(workers * weight)) if workers else 0))
            # Workers stack their pieces in shared memory; this process hands over elements.
            components.append(
                component_plan(
                    plan,
                    batch if pack is None else None,
                    stacked=bool(shares[-1]),
                    restart=self.on_end == "restart",
                )
            )
            labels.append(f"#{i} {ds.source!r}"[:80])
        mix = Mix(self.weights, self.seed, self.on_end, tuple(labels))
        return MixPlan(
            tuple(components),
            mix,
            tuple(shares),
            pack,
            batch,
            tail,
            hosts,
            host,
            fingerprint,
            described=self.described(stages),
        )

    def described(self, stages: tuple[Stage, ...]) -> str:
        """All the fingerprint covers but the weights: the components, seed, `on_end` and the
        `stages` after mix, as JSON text (a state of other weights is checked against it)."""
        return json.dumps(
            {
                "mix": [ds.fingerprint() for ds in self.datasets],
                "seed": self.seed,
                "on_end": self.on_end,
                "ops": [stage.describe() for stage in stages],
            },
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )

    def summary(self, stages: tuple[Stage, ...]) -> str:
        """How the mixture, with `stages` after it, shows in a repr."""
        return (
            f"Dataset.mix({len(self.datasets)} components, weights="
            f"{[round(w, 4) for w in self.weights]}, on_end={self.on_end!r}, "
            f"stages={[s.name for s in stages]})"
        )

    def fingerprint(self, stages: tuple[Stage, ...]) -> str:
        """Identifies the components, weights, seed and `stages` after mix."""
        return weighed_fingerprint(self.described(stages), self.weights)


def mixture_stats(plan: StreamPlan, position: Any) -> list[dict[str, Any]] | None:
    """Per component of a mixture (None for another plan): elements taken into it since the
    run started or its schedule last restarted, their share, the weight."""
    if not isinstance(plan, MixPlan):
        return None
    taken = position.taken
    total = sum(taken) or 1
    mix = plan.mix
    return [
        {"component": label, "taken": t, "share": t / total, "weight": w}
        for label, t, w in zip(mix.labels, taken, mix.weights)
    ]


def check_component(
    i: int, stages: tuple[Stage, ...], sharded: bool, settings: ComponentSettings
) -> None:
    """Raises unless a dataset of these stages and settings can be component `i` of a mixture."""
    workers, prefetch, timeout_s = settings.workers, settings.prefetch, settings.options.timeout_s
    if any(isinstance(stage, (Batch, Pack)) for stage in stages):
        raise InvalidArgumentError(
            f"mix component {i} batches or packs: batch and pack the mixture, after mix"
        )
    if sharded:
        raise InvalidArgumentError(
            f"mix component {i} is sharded: shard the mixture, which shards every component alike"
        )
    if AUTO in (workers, prefetch):
        raise InvalidArgumentError(
            f"mix component {i} has 'auto' workers or prefetch; give the "
            "mixture or the component a number"
        )
    if timeout_s is not None:
        raise InvalidArgumentError(
            f"mix component {i} has options(timeout_s=...), which does not watch a mixture yet"
        )


def check_mix(datasets: Any, weights: Any, seed: Any, on_end: Any) -> tuple[tuple[float, ...], str]:
    """Validated weights (summing to 1) for `datasets`; raises naming the bad value."""
    if not isinstance(datasets, (list, tuple)) or not datasets:
        raise InvalidArgumentError(f"mix needs a non-empty list of datasets, got {datasets!r}")
    if weights is None:
        weights = [1.0] * len(datasets)
    if not isinstance(weights, (list, tuple)) or len(weights) != len(datasets):
        raise InvalidArgumentError(
            f"mix needs one weight per dataset ({len(datasets)}), got {weights!r}"
        )
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w) or w <= 0:
            raise InvalidArgumentError(f"mix weights must be positive numbers, got {weights!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidArgumentError(f"mix seed must be an int, got {seed!r}")
    if on_end not in ON_END:
        raise InvalidArgumentError(f"mix on_end must be one of {ON_END}, got {on_end!r}")
    total = float(sum(weights))
    return tuple(float(w) / total for w in weights), on_end


class ComponentFeed:
    """One component's pieces, handed out an element count at a time, in order."""

    def __init__(
        self, index: int, plan: MixPlan, pieces: Iterator[PieceLike | End], counters: Counters
    ):
        self.index, self.label = index, plan.mix.labels[index]
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
            elif isinstance(step, End):
                if not self.made_this_epoch and step.whole_epoch and self.plan.epochs is None:
                    raise TpufeedError(
                        f"mixture component {self.label} made nothing in epoch "
                        f"{step.epoch}, so restarting it would loop forever"
                    )
                self.made_this_epoch = False
            elif isinstance(step, Piece):
                self.budget.charge(step.skipped)
                if step.size:
                    self.slices.append((step, 0, step.size))
                    self.available += step.size
                    self.made_this_epoch = True
        return min(n, self.available)

    def take(self, n: int) -> Slices:
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


class MixtureExecutor:
    """Runs a mixture: each component's chunks where its settings say (a component with
    workers in a pool of its own, the others in this process), interleaved by the schedule."""

    def __init__(
        self,
        plan: MixPlan,
        cursor: MixCursor,
        counters: Counters,
        clock: StageClock,
        stopped_s: float | None = STOPPED_S,
        shm_budget_bytes: int | None = None,
    ):
        """`stopped_s` and `shm_budget_bytes` are the mixture's options (`Options`): the budget
        is shared out over the components' workers."""
        from tpufeed.run.workers.budget import shm_budget  # imported when a mixture runs
        from tpufeed.run.workers.engine import WorkerExecutor

        self.plan, self.cursor, self.counters, self.clock = plan, cursor, counters, clock
        budget, workers_in_all = shm_budget(shm_budget_bytes), max(1, sum(plan.workers))
        self.components: list[Executor] = [
            WorkerExecutor(
                component,
                position,
                workers,
                0,
                clock,
                stopped_s=stopped_s,
                shm_budget_bytes=budget * workers // workers_in_all,
            )
            if workers
            else InProcessExecutor(component, position, clock)
            for component, position, workers in zip(plan.components, cursor.cursors, plan.workers)
        ]

    def pieces(self) -> Iterator[PieceLike | End]:
        feeds = [
            ComponentFeed(i, self.plan, executor.pieces(), self.counters)
            for i, executor in enumerate(self.components)
        ]
        batch = self.plan.batch if self.plan.pack is None else None
        return iter(MixedPieces(self.plan.mix, batch, self.cursor, feeds))

    def reread(self) -> Reread:
        def outputs(records: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[Any]]:
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

        return outputs

    def close(self) -> None:
        for executor in self.components:
            executor.close()

    def deepen(self, prefetch: int) -> None:
        pass  # the run's prefetch thread keeps items ahead

    @property
    def worker_pids(self) -> list[int]:
        return [pid for executor in self.components for pid in executor.worker_pids]

    def worker_stats(self) -> tuple[WorkerStats, ...]:
        """The components' workers, numbered on from one component to the next."""
        out: list[WorkerStats] = []
        for executor in self.components:
            out += [replace(w, worker=len(out) + w.worker) for w in executor.worker_stats()]
        return tuple(out)

    @property
    def shm_bytes(self) -> int:
        return sum(executor.shm_bytes for executor in self.components)

    @property
    def queue_depth(self) -> int:
        return 0
