"""From what `Dataset.iterator(state)` is given to where the new iterator starts.

`state` is None (the start), one host's state, or the list of every host's states at one step
of a run. The cursor arithmetic is tpufeed.order.cursor's; this module reads the states, checks
they belong to this pipeline and fit its data, and hands the stream stages their share.
"""

from __future__ import annotations

from typing import Any

from tpufeed.order.cursor import Cursor, check_in_range, epoch_start
from tpufeed.order.elastic import resume_all, resume_one
from tpufeed.errors import StateError
from tpufeed.mix import MixCursor, MixPlan, mix_cursor, resume_mix
from tpufeed.plan import Plan
from tpufeed.ops.pack import resume_pack
from tpufeed.order.state import parse_each, stages_from_dict, state_from_dict, states_from_list

Stages = dict[str, Any] | None


def resume(plan: Plan | MixPlan, state: Any) -> tuple[Cursor | MixCursor, Stages]:
    """(cursor, stream stages' state) of host `plan.host` of `plan.hosts` continuing `state`."""
    if isinstance(plan, MixPlan):
        return _resume_mixture(plan, state)
    n = len(plan.source)
    stages = None
    if state is None:
        cursor = epoch_start(0, plan.hosts, plan.host)
    elif isinstance(state, (list, tuple)):
        saved = [check_in_range(c, n) for c in states_from_list(state, plan.fingerprint)]
        cursor = resume_all(saved, n, plan.hosts, plan.host)
        held = [stages_from_dict(s) for s in state]
        if saved[0].hosts == plan.hosts:
            stages = held[[c.host for c in saved].index(plan.host)]
        elif plan.pack is not None:
            stages = {"pack": resume_pack([h and h.get("pack") for h in held],
                                          plan.hosts, plan.host)}
    else:
        saved_one = check_in_range(state_from_dict(state, plan.fingerprint), n)
        cursor = resume_one(saved_one, n, plan.hosts, plan.host, plan.counts_depend_on_data)
        if cursor == saved_one:
            stages = stages_from_dict(state)
    if plan.epochs is not None and cursor.epoch >= max(1, plan.epochs):
        raise StateError(f"iterator state is in epoch {cursor.epoch}, but this pipeline runs "
                         f"{plan.epochs} epoch(s): it comes from a run with more epochs")
    return cursor, stages


def _resume_mixture(plan: MixPlan, state: Any) -> tuple[MixCursor, Stages]:
    if state is None:
        return plan.start(), None
    if isinstance(state, (list, tuple)):
        saved = parse_each(state, lambda s: mix_cursor(s, plan))
        if len(saved) == saved[0].cursors[0].hosts == plan.hosts:
            mine = [i for i, s in enumerate(saved) if s.cursors[0].host == plan.host]
            if len(mine) == 1:
                return saved[mine[0]], stages_from_dict(state[mine[0]])
        sizes = [len(component.source) for component in plan.components]
        for s in saved:
            for c, n in zip(s.cursors, sizes):
                check_in_range(c, n)
        cursor = resume_mix(plan, saved, sizes)
        held = [(stages_from_dict(s) or {}).get("pack") for s in state]
        stages = ({"pack": resume_pack(held, plan.hosts, plan.host, plan.record_key + 2)}
                  if plan.pack is not None else None)
        return cursor, stages
    cursor = mix_cursor(state, plan)
    for c, component in zip(cursor.cursors, plan.components):
        check_in_range(c, len(component.source))
    first = cursor.cursors[0]
    if (first.hosts, first.host) != (plan.hosts, plan.host):
        raise StateError(f"this state is host {first.host}'s of {first.hosts}: a mixture's "
                         "counts depend on its components' data, so to continue on another "
                         "host pass the states of all hosts: ds.iterator([state_host0, ...])")
    return cursor, stages_from_dict(state)
