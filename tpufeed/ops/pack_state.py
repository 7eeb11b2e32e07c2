"""What the pack stage holds, written into a state and read back: segments named, not stored.

A segment waiting in a row is named by its ref: the ints that find its record again (epoch
position; in a mixture, component, epoch and position), the output of that record and the
piece of it. An entry is `[1, *refs]`, one row and its segments, or `[n, *ref]`, n rows that
consecutive pieces of one record fill alone (a long document waiting to be handed out stays a
few ints). `{"closed": entries closed, "rows": entries, "loose": entries}`, where `loose` are
segments a host places afresh after a change of host count. Every state writes all three keys,
the entries as their JSON text (their number changes from item to item: a string keeps the
state's structure fixed); states of version 2 wrote lists, and only the keys that held some.

>>> SavedPack.from_dict({"closed": 1, "rows": "[[1,7,0,0],[1,9,0,0,11,0,0]]"}, 3).rows
((1, ((7, 0, 0),)), (1, ((9, 0, 0), (11, 0, 0))))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from tpufeed.errors import StateError
from tpufeed.ops.first_fit import Row
from tpufeed.order.state import list_text, read_list

Ref = tuple[int, ...]  # the element's name (its piece's refs()), then the piece of it
Entry = tuple[int, tuple[Ref, ...]]  # (n, refs): one row of refs, or n rows of pieces of refs[0]


class PackState(NamedTuple):
    """The pack stage's state at one item: its rows (closed ones first) and the number of
    segments each held then (rows only grow, so the count fixes them)."""

    rows: tuple[Row, ...]
    counts: tuple[int, ...]  # segments in each row then
    closed: int

    def to_dict(self) -> dict[str, Any]:
        """`{"closed": ..., "rows": ..., "loose": "[]"}`, runs of whole rows of one record
        written as one."""
        entries: list[list[int]] = []
        closed = 0
        for r, (row, count) in enumerate(zip(self.rows, self.counts)):
            refs = [s.ref for s in row.segments[:count]]
            last = entries[-1] if entries and r <= self.closed else None
            if (
                r < self.closed
                and len(refs) == 1
                and not row.free[0]
                and last is not None
                and last[0] >= 1
                and len(last) == 1 + len(refs[0])
                and _whole_run_follows(last, refs[0])
            ):
                last[0] += 1
                continue
            entries.append([1, *(n for ref in refs for n in ref)])
            closed += r < self.closed
        return {"closed": closed, "rows": list_text(entries), "loose": "[]"}


class SavedPack(NamedTuple):
    """What a saved state says the pack stage held, read and checked once."""

    closed: int  # rows[:closed] were closed, the others open
    rows: tuple[Entry, ...]
    loose: tuple[Entry, ...] = ()  # segments to place afresh (after a change of host count)

    @classmethod
    def from_dict(cls, state: Any, arity: int) -> SavedPack:
        """The pack part of a state, its refs `arity` ints each (record ints, output, piece)."""
        if not isinstance(state, dict):
            raise StateError(f"iterator state field 'pack' must be a dict, got {state!r}")
        rows = tuple(_entry(e, arity) for e in read_list(state.get("rows", []), "pack.rows"))
        loose = tuple(_entry(e, arity) for e in read_list(state.get("loose", []), "pack.loose"))
        closed = state.get("closed", 0)
        if not isinstance(closed, int) or isinstance(closed, bool):
            raise StateError(f"iterator state field pack.closed must be an int, got {closed!r}")
        if not 0 <= closed <= len(rows):
            raise StateError(
                f"iterator state field pack.closed is {closed}, but it holds {len(rows)} rows"
            )
        if any(count > 1 for count, _ in rows[closed:]):
            raise StateError(
                "iterator state field pack holds a run of whole rows among its open rows"
            )
        return cls(closed, rows, loose)

    def to_dict(self) -> dict[str, Any]:
        """The state this was read from: what a state taken before the next item says."""
        return {
            "closed": self.closed,
            "rows": list_text(_entries(self.rows)),
            "loose": list_text(_entries(self.loose)),
        }

    @property
    def holds_nothing(self) -> bool:
        """Whether the stage held no segment (every state of a pack pipeline has this part)."""
        return not self.rows and not self.loose

    def records(self) -> list[tuple[int, ...]]:
        """The records whose outputs the saved segments are, in order, once each."""
        return sorted({ref[:-2] for _, refs in self.rows + self.loose for ref in refs})


def resume_pack(saved: Sequence[SavedPack | None], hosts: int, host: int) -> SavedPack:
    """What host `host` of `hosts` packs first after a stop of another host count: its share
    of the segments the old hosts held in rows (closed or open), placed afresh."""
    entries: list[Entry] = []
    for pack in saved:
        for count, refs in pack.rows + pack.loose if pack is not None else ():
            entries += [(count, refs[:1])] if count > 1 else [(1, (ref,)) for ref in refs]
    return SavedPack(0, (), tuple(entries[host::hosts]))


def run_of(first: Ref, count: int) -> list[Ref]:
    """The refs of `count` consecutive pieces of one output, from `first` on."""
    return [(*first[:-1], first[-1] + j) for j in range(count)]


def _whole_run_follows(entry: list[int], ref: tuple[int, ...]) -> bool:
    """Whether `ref` is the next piece of the run `entry` ([n, *first ref]) of whole rows."""
    first = entry[1:]
    return list(ref[:-1]) == first[:-1] and ref[-1] == first[-1] + entry[0]


def _entries(entries: Sequence[Entry]) -> list[list[int]]:
    """Entries as a state writes them: `[n, *refs]`, the refs' ints in a row."""
    return [[count, *(n for ref in refs for n in ref)] for count, refs in entries]


def _entry(entry: Any, arity: int) -> Entry:
    """(n, refs) of a state entry `[n, *refs]` (n > 1: one ref, the first of n pieces)."""
    if (
        not isinstance(entry, list)
        or not entry
        or not isinstance(entry[0], int)
        or isinstance(entry[0], bool)
        or entry[0] < 1
    ):
        raise StateError(
            f"iterator state field pack holds {entry!r}, not [count, record, output, piece, ...]"
        )
    refs = _refs(entry[1:], arity)
    if entry[0] > 1 and len(refs) != 1:
        raise StateError(f"iterator state field pack holds a run {entry!r} of more than one piece")
    return entry[0], refs


def _refs(flat: Sequence[Any], arity: int) -> tuple[Ref, ...]:
    if len(flat) % arity or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in flat
    ):
        raise StateError(
            f"iterator state field pack holds {list(flat)!r}, not groups of "
            f"{arity} non-negative ints (record, output, piece)"
        )
    return tuple(tuple(flat[i : i + arity]) for i in range(0, len(flat), arity))
