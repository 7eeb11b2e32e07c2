"""`Dataset.mix([a, b, c], weights=[0.5, 0.3, 0.2], seed=0)`: several pipelines, one stream.

Each component is a whole pipeline (its own source, shuffle, epochs and record stages); the
mixture takes their elements in the exact proportions of the weights (tpufeed.order.schedule), and
the stages after `mix` (`pack`, `batch`) see the mixture. `on_end` says what happens when a
component ends: "restart" it with its next epoch (a fresh permutation; the default, so the
mixture never ends), "stop" the mixture, or "drop" it from the mix (the others keep their
relative weights).

The state is one cursor per component and the count taken from each (the schedule's state).
This module holds what a mixture is; tpufeed.mixing runs it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tpufeed.order.cursor import Cursor
from tpufeed.order.elastic import resume_all
from tpufeed.errors import InvalidArgumentError, StateError
from tpufeed.plan import Plan
from tpufeed.ops.base import RecordStage
from tpufeed.ops.batch import Batch
from tpufeed.ops.pack import Pack
from tpufeed.order.state import STATE_VERSION, parse_state, state_from_dict, state_to_dict

ON_END = ("restart", "stop", "drop")
_PIECE = 256  # units per component chunk when the mixture does not batch


class MixCursor(NamedTuple):
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


def component_plan(plan: Plan, mixture_batch: Batch | None, stacked: bool, restart: bool) -> Plan:
    """A component as the mixture runs it: in chunks of a mixture batch's size, its survivors
    stacked into pieces if `stacked` (what workers do), never finished into batches."""
    batch = None
    if stacked and mixture_batch is not None:
        batch = Batch(mixture_batch.batch_size, False, mixture_batch.pad, mixture_batch.cut)
    size = mixture_batch.batch_size if mixture_batch is not None else _PIECE
    return dataclasses.replace(plan, batch=batch, tail=(), pieces_only=True, piece_size=size,
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
        state.update({key: value.to_dict() if hasattr(value, "to_dict") else value
                      for key, value in stages.items()})
    return state


def mix_cursor(state: Any, plan: MixPlan) -> MixCursor:
    """The cursor of a mixture's state (validated against `plan`)."""
    state = parse_state(state)
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
        at = [stages.index(s) for s in (pack, batch) if s is not None]
        if (at[0] if at else len(stages)) != 0:
            raise InvalidArgumentError(
                "after mix come pack and batch (and stages on their items); put per-element "
                "stages (map, filter, ...) in the components, before mix")
        components, labels, shares = [], [], []
        for i, (ds, weight) in enumerate(zip(self.datasets, self.weights)):
            plan = ds.shard(host, hosts)._plan()
            own = ds._workers  # noqa: SLF001 - the mixture runs its components
            shares.append(own if own else (max(1, round(workers * weight)) if workers else 0))
            # Workers stack their pieces in shared memory; this process hands over elements.
            components.append(component_plan(plan, batch if pack is None else None,
                                             stacked=bool(shares[-1]),
                                             restart=self.on_end == "restart"))
            labels.append(f"#{i} {ds.source!r}"[:80])
        return MixPlan(tuple(components), tuple(labels), self.weights, self.seed, self.on_end,
                       tuple(shares), pack, batch, tuple(stages[(at[-1] + 1) if at else 0:]),
                       hosts, host, fingerprint)

    def describe(self) -> Any:
        return {"mix": [ds.fingerprint() for ds in self.datasets], "weights": list(self.weights),
                "seed": self.seed, "on_end": self.on_end}


def check_component(i: int, stream_stage: Any, sharded: bool, auto: bool) -> None:
    """Raises unless a dataset can be component `i` of a mixture."""
    if stream_stage is not None:
        raise InvalidArgumentError(f"mix component {i} batches or packs: batch and pack the "
                                   "mixture, after mix")
    if sharded:
        raise InvalidArgumentError(f"mix component {i} is sharded: shard the mixture, which "
                                   "shards every component alike")
    if auto:
        raise InvalidArgumentError(f"mix component {i} has 'auto' workers or prefetch; give the "
                                   "mixture or the component a number")


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
