"""Continuing a stop on another host count: which positions each new host takes.

Pure arithmetic on cursors (tpufeed.order.cursor): the cursors of all hosts of a stop say
exactly which positions were consumed, and the new hosts split the rest between them. One
host's cursor suffices only where the hosts were in lockstep (counts that cannot depend on the
data), or at the start of a segment.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpufeed.errors import StateError
from tpufeed.order.cursor import Cursor, Layer, MixCursor, at_segment_start


def resume_one(saved: Cursor, n: int, hosts: int, host: int, counts_depend_on_data: bool) -> Cursor:
    """The cursor for host `host` of `hosts` that continues from one host's `saved` cursor.

    Same host and host count: continue exactly. Otherwise every host is taken to have consumed
    what `saved` did (lockstep), which holds only where counts cannot depend on the data, or at
    the start of a segment; elsewhere the other hosts' cursors are needed (`resume_all`).
    """
    if (saved.hosts, saved.host) == (hosts, host):
        return saved
    if (counts_depend_on_data and not at_segment_start(saved)) or saved.carries or saved.emitted:
        raise StateError(
            f"this state is host {saved.host}'s of {saved.hosts}, taken after its share's "
            f"{saved.consumed} positions; the pipeline's counts depend on the data (filter, "
            "flat_map, ignore_errors, ...), so the hosts were not in lockstep and one host's state "
            f"cannot say what the others consumed. To continue as host {host} of {hosts}, pass "
            "the states of all hosts: ds.iterator([state_host0, state_host1, ...])"
        )
    top = saved.space_sizes(n)[-1]
    base = min(top, saved.base + saved.consumed * saved.hosts)
    return Cursor(saved.epoch, base, hosts, host, 0, 0, saved.layers)


def resume_all(saved: Sequence[Cursor], n: int, hosts: int, host: int) -> Cursor:
    """The cursor for host `host` of `hosts` that continues from the cursors of all hosts of a
    stop: exactly the positions none of them consumed, whatever each consumed."""
    old = check_complete(saved)
    if old[0].hosts == hosts:
        return old[host]  # each host's own state says all it needs, wherever the others are
    check_same_stop(old)
    first = old[0]
    carries: list[tuple[int, int]] = []
    strides: list[int] = []
    for cursor in old:
        started = len(cursor.carries)
        if cursor.consumed < started:
            left = list(cursor.carries[cursor.consumed :])
            if cursor.emitted:
                left[0] = (left[0][0], max(left[0][1], cursor.emitted))
            carries += left
            strides.append(0)
            continue
        done = cursor.consumed - started
        if cursor.emitted:  # a unit half delivered: another host delivers the rest
            position = cursor.positions(n, cursor.consumed, 1)[0]
            carries.append((int(position[0]), cursor.emitted))
            done += 1
        strides.append(done)
    if len(set(strides)) == 1:
        top = first.space_sizes(n)[-1]
        base, layers = min(top, first.base + strides[0] * first.hosts), first.layers
    else:
        base, layers = 0, first.layers + (Layer(first.base, first.hosts, tuple(strides)),)
    return Cursor(first.epoch, base, hosts, host, 0, 0, layers, tuple(carries[host::hosts]))


def check_complete(saved: Sequence[Cursor]) -> list[Cursor]:
    """The cursors of a run's hosts, one per host, ordered by host; raises if they are not."""
    if not saved:
        raise StateError("an empty list of states: pass the state of every host of the run")
    old = sorted(saved, key=lambda c: c.host)
    first = old[0]
    for c in old[1:]:
        if c.hosts != first.hosts:
            raise StateError(
                f"host {c.host}'s state is of a {c.hosts}-host run, host "
                f"{first.host}'s of a {first.hosts}-host run: the states come from "
                "different runs"
            )
    hosts = [c.host for c in old]
    if hosts != list(range(first.hosts)):
        missing = sorted(set(range(first.hosts)) - set(hosts))
        repeated = sorted({h for h in hosts if hosts.count(h) > 1})
        raise StateError(
            f"the states must be those of all {first.hosts} hosts of the run, one each; "
            + "; ".join(
                part
                for part in (
                    f"missing host(s) {missing}" if missing else "",
                    f"host(s) {repeated} given more than once" if repeated else "",
                )
                if part
            )
        )
    return old


def check_same_stop(old: list[Cursor]) -> None:
    """Raises unless the hosts' cursors continue one segment of one epoch."""
    first = old[0]
    for c in old[1:]:
        if c.epoch != first.epoch:
            raise StateError(
                f"host {c.host}'s state is in epoch {c.epoch} and host 0's in epoch "
                f"{first.epoch}: take the states of all hosts at one step (to_jax and "
                "iterator(uneven=...) end every epoch on all hosts at the same step)"
            )
        if (c.base, c.layers) != (first.base, first.layers):
            raise StateError(
                f"host {c.host}'s state and host 0's continue different stops of "
                "the run (their segments differ): the states come from different steps"
            )


def resume_mixture(
    saved: Sequence[MixCursor], sizes: Sequence[int], hosts: int, host: int
) -> MixCursor:
    """The mixture cursor for host `host` of `hosts` that continues from all hosts' mixture
    cursors: each component exactly once per its epoch (the schedule restarts its counts)."""
    k = len(sizes)
    cursors = tuple(
        resume_all([s.cursors[i] for s in saved], sizes[i], hosts, host) for i in range(k)
    )
    active = tuple(any(s.active[i] for s in saved) for i in range(k))
    return MixCursor(cursors, (0,) * k, active)
