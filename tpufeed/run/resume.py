"""From what `Dataset.iterator(state)` is given to where the new iterator starts.

`state` is None (the start), one host's state, or the list of every host's states at one step
of a run. It is read once, here (`read`), into `Saved` objects: the position (a cursor, or a
mixture's) and what the stream stage held, each part read by its owner (tpufeed.order.state
for positions and for the files the state was taken on, the stage for its own part). `resume` then works on those alone: the cursor
arithmetic is tpufeed.order.elastic's, and the stream stage gets its share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpufeed.errors import StateError
from tpufeed.ops.pack_state import SavedPack, resume_pack
from tpufeed.ops.registry import read_stage_state, state_key
from tpufeed.order.cursor import check_in_range
from tpufeed.order.elastic import resume_all, resume_mixture, resume_one
from tpufeed.order.state import check_header, check_shards, load_state
from tpufeed.run.plan import MixPlan, Plan, StreamPlan


@dataclass(frozen=True)
class Saved:
    """One host's state, read and checked: where it stood, and what its stream stage held."""

    position: Any  # a Cursor, or a mixture's MixCursor
    stages: dict[str, Any]  # the stream stage's part, read by the stage (empty: it held nothing)


@dataclass(frozen=True)
class Start:
    """Where a new run starts: its position, and what its stream stage holds there."""

    position: Any
    stages: dict[str, Any] | None = None


def read(plan: StreamPlan, state: Any) -> Saved | list[Saved]:
    """`state` (one host's, or a list of every host's) read once into `Saved` objects; a
    StateError names what is wrong, and which state of a list."""
    if not isinstance(state, (list, tuple)):
        return _read_one(plan, state)
    if not state:
        raise StateError("an empty list of iterator states: pass every host's get_state()")
    saved = []
    for i, one in enumerate(state):
        try:
            saved.append(_read_one(plan, one))
        except StateError as e:
            raise StateError(f"state {i} of the list: {e}") from None
    return saved


def _read_one(plan: StreamPlan, state: Any) -> Saved:
    state = load_state(state)
    check_header(state, plan.fingerprint)
    check_shards(state, plan.shard_stamps)
    position = plan.position_from(state)
    key = state_key(plan.pack, plan.batch)
    held = read_stage_state(key, state[key], plan.record_key + 2) if key in state else None
    return Saved(position, {} if held is None or held.holds_nothing else {key: held})


def resume(plan: StreamPlan, state: Any) -> Start:
    """Where host `plan.host` of `plan.hosts` starts to continue `state` (None: the start)."""
    if state is None:
        return Start(plan.start())
    saved = read(plan, state)
    if isinstance(plan, MixPlan):
        return _resume_mixture(plan, saved)
    if not isinstance(plan, Plan):
        raise TypeError(f"no resume for a {type(plan).__name__}")
    start = _resume_plan(plan, saved)
    epoch = start.position.epoch
    if plan.epochs is not None and epoch >= max(1, plan.epochs):
        raise StateError(
            f"iterator state is in epoch {epoch}, but this pipeline runs "
            f"{plan.epochs} epoch(s): it comes from a run with more epochs"
        )
    return start


def _resume_plan(plan: Plan, saved: Saved | list[Saved]) -> Start:
    n = len(plan.source)
    if isinstance(saved, Saved):
        mine = check_in_range(saved.position, n)
        cursor = resume_one(mine, n, plan.hosts, plan.host, plan.counts_depend_on_data)
        return Start(cursor, saved.stages or None if cursor == mine else None)
    cursors = [check_in_range(s.position, n) for s in saved]
    cursor = resume_all(cursors, n, plan.hosts, plan.host)
    if cursors[0].hosts == plan.hosts:
        return Start(cursor, saved[[c.host for c in cursors].index(plan.host)].stages or None)
    return Start(cursor, _share_of_rows(plan, saved))


def _resume_mixture(plan: MixPlan, saved: Saved | list[Saved]) -> Start:
    sizes = [len(component.source) for component in plan.components]
    for one in [saved] if isinstance(saved, Saved) else saved:
        for cursor, n in zip(one.position.cursors, sizes):
            check_in_range(cursor, n)
    if isinstance(saved, Saved):
        first = saved.position.cursors[0]
        if (first.hosts, first.host) != (plan.hosts, plan.host):
            raise StateError(
                f"this state is host {first.host}'s of {first.hosts}: a mixture's "
                "counts depend on its components' data, so to continue on another "
                "host pass the states of all hosts: ds.iterator([state_host0, ...])"
            )
        return Start(saved.position, saved.stages or None)
    hosts = [s.position.cursors[0] for s in saved]
    if len(saved) == hosts[0].hosts == plan.hosts:
        mine = [i for i, c in enumerate(hosts) if c.host == plan.host]
        if len(mine) == 1:
            return Start(saved[mine[0]].position, saved[mine[0]].stages or None)
    position = resume_mixture([s.position for s in saved], sizes, plan.hosts, plan.host)
    return Start(position, _share_of_rows(plan, saved))


def _share_of_rows(plan: StreamPlan, saved: Sequence[Saved]) -> dict[str, Any] | None:
    """After a change of host count: this host's share of what the old hosts' pack held."""
    if plan.pack is None:
        return None
    held: list[SavedPack | None] = [s.stages.get("pack") for s in saved]
    return {"pack": resume_pack(held, plan.hosts, plan.host)}
