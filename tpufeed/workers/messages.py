"""The messages between the parent and its workers, one small dataclass each.

parent -> worker: `Start` (once), then `Task`, `Free` and `Stop`.
worker -> parent: `Ready` (once), then an `Answer` or a `Failure` per task; a `Failure` with
task_id -1 is a start-up failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Start:
    sys_path: list[str]
    payload: bytes  # the cloudpickled plan and worker settings


@dataclass(frozen=True)
class Task:
    """Run the records `indices` (int64 bytes) of `epoch`, skipping `skips` outputs per unit."""

    task_id: int
    epoch: int
    indices: bytes
    skips: bytes | None = None


@dataclass(frozen=True)
class Free:
    """The parent has read `slot`; the worker may write into it again."""

    slot: int


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class Answer:
    """What a task made (a `Piece` without its chunk). Stacked payloads live in shared memory:
    `payload` is then their layout in `slot` (`new_segment`: the slot's new file, to map)."""

    task_id: int
    payload: Any
    size: int
    units: list[int] | None
    outs: list[int] | None
    last: list[bool] | None
    final: bool
    slot: int | None = None
    new_segment: str | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)  # error fields, in order
    times: dict[str, tuple[float, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    task_id: int  # -1: the worker failed to start
    fields: dict[str, Any]
