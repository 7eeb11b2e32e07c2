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

from tpufeed.errors import InvalidArgumentError, StateError
from tpufeed.ops.pack_state import SavedPack, resume_pack
from tpufeed.ops.registry import read_stage_state, state_key
from tpufeed.order.cursor import check_in_range
from tpufeed.order.elastic import resume_all, resume_mixture, resume_one
from tpufeed.order.state import (
    check_header,
    check_shards,
    check_version,
    load_state,
    saved_weights,
    weighed_fingerprint,
)
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


@dataclass(frozen=True)
class NewWeights:
    """A state given with `allow_new_weights=True`: it may resume into a mixture that differs
    from the one it was taken on by its weights alone."""

    state: Any


def reweighable(state: Any, allow_new_weights: bool) -> Any:
    """`state` as a launch takes it: marked where it may resume into other mixture weights."""
    if not isinstance(allow_new_weights, bool):
        raise InvalidArgumentError(
            f"allow_new_weights must be True or False, got {allow_new_weights!r}"
        )
    return NewWeights(state) if allow_new_weights else state


def read(plan: StreamPlan, state: Any, new_weights: bool = False) -> Saved | list[Saved]:
    """`state` (one host's, or a list of every host's) read once into `Saved` objects; a
    StateError names what is wrong, and which state of a list."""
    if not isinstance(state, (list, tuple)):
        return _read_one(plan, state, new_weights)
    if not state:
        raise StateError("an empty list of iterator states: pass every host's get_state()")
    saved = []
    for i, one in enumerate(state):
        try:
            saved.append(_read_one(plan, one, new_weights))
        except StateError as e:
            raise StateError(f"state {i} of the list: {e}") from None
    return saved


def _read_one(plan: StreamPlan, state: Any, new_weights: bool) -> Saved:
    state = load_state(state)
    reweighed = isinstance(plan, MixPlan) and new_weights and _weights_changed(plan, state)
    if not reweighed:
        check_header(state, plan.fingerprint, *_parts(plan))
    check_shards(state, plan.shard_stamps)
    position = plan.position_from(state)
    if reweighed:  # the schedule starts anew here, with the new weights
        position = position._replace(taken=(0,) * len(position.taken))
    key = state_key(plan.pack, plan.batch)
    held = read_stage_state(key, state[key], plan.record_key + 2) if key in state else None
    return Saved(position, {} if held is None or held.holds_nothing else {key: held})


def _parts(plan: StreamPlan) -> tuple[str, tuple[str, ...]]:
    """A pipeline's parts and the names of its stages; none for a mixture."""
    return (plan.parts, plan.part_names) if isinstance(plan, Plan) else ("", ())


def _weights_changed(plan: MixPlan, state: dict[str, Any]) -> bool:
    """Whether `state` was taken on this mixture with other weights; raises a StateError
    naming what else differs (a component, the seed or the stages after mix)."""
    check_version(state)
    if state.get("fingerprint") == plan.fingerprint:
        return False
    plan.position_from(state)  # names a component that differs, or a count of components
    weights = saved_weights(state, len(plan.components))
    if weights is None:
        raise StateError(
            "iterator state does not record the weights of the mixture it was taken on (an "
            "older tpufeed wrote it), so it cannot be checked against a mixture of other "
            "weights: resume it into the mixture it was taken on, and take a state there"
        )
    if state.get("fingerprint") != weighed_fingerprint(plan.described, weights):
        raise StateError(
            "iterator state was taken on a mixture of these components whose seed, on_end or "
            "stages after mix (pack, batch, ...) differ from this one's; allow_new_weights "
            "lets the weights alone change"
        )
    return weights != plan.mix.weights


def resume(plan: StreamPlan, state: Any) -> Start:
    """Where host `plan.host` of `plan.hosts` starts to continue `state` (None: the start;
    `NewWeights(state)`: a mixture's state, into other weights)."""
    new_weights = isinstance(state, NewWeights)
    if isinstance(state, NewWeights):
        if not isinstance(plan, MixPlan):
            raise InvalidArgumentError(
                "allow_new_weights=True resumes a mixture (Dataset.mix) with other weights; "
                "this pipeline is not a mixture"
            )
        state = state.state
    if state is None:
        return Start(plan.start())
    saved = read(plan, state, new_weights)
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
    n = plan.records_per_epoch
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
    sizes = [component.records_per_epoch for component in plan.components]
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
