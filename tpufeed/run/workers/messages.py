"""The messages between the parent and its workers, one small dataclass each.

parent -> worker: `Start` (once), then `Task`, `Free`, `Released`, `Spill` and `Stop`.
worker -> parent: `Ready` (once), then an `Answer` or a `Failure` per task; a `Failure` with
task_id -1 is a start-up failure. `Dropped` (segments given back to stay within the
shared-memory budget) and `Cramped` (a batch waits for room in it) may come between them.

An answer in shared memory (the common case: a batch, or unbatched elements, in a slot) goes as
packed fields, and its layout and stage labels only when they differ from that worker's last
(`encode_answer`, `decode_result`): a batch of the same shapes as the last costs the parent one
struct unpack, not an unpickling. Other answers, and the rest, go pickled.

The parent is the one serial part of a host's input, so what it sends most often, tasks and
freed slots, goes as packed bytes (`encode_task`, `encode_free`): no pickler is built and no
object made per message, and slots freed since the last message ride along with the next task
in the same write.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

_TASK = struct.Struct("<cqqiii")  # b"T", task_id, epoch, records, skips (-1: none), freed slots
# b"A", task_id, size, slot, final, elements, then the lengths of: the new segment's name, the
# layout (0: the same as this worker's last), the stage labels (0: the same), the times, and
# what the worker observed (counts and timeline events: `tpufeed.observe.shipping`)
_ANSWER = struct.Struct("<cqii??HIIII")
_STOP = b"S"
_FREE = b"F"
_RELEASED = b"R"
_SPILL = b"P"


@dataclass(frozen=True)
class Start:
    sys_path: list[str]
    payload: bytes  # the cloudpickled plan and settings, the same bytes for every worker
    index: int  # which worker this is


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
class Released:
    """The parent has unmapped `nbytes` of the worker's segments (replaced or dropped)."""

    nbytes: int


@dataclass(frozen=True)
class Dropped:
    """The worker has given back the segments of `slots` (idle, to stay within its budget)."""

    slots: list[int]


@dataclass(frozen=True)
class Cramped:
    """The batch of `task_id` (`nbytes`) waits for room in the worker's share of the budget,
    with no idle segment left to give back."""

    task_id: int
    nbytes: int


@dataclass(frozen=True)
class Spill:
    """The batch of `task_id` is not to wait for room: the worker sends it through the pipe
    (the parent waits for it, and the batches its consumer holds leave no room)."""

    task_id: int


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    pass


class Answer(NamedTuple):
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
    skipped: tuple[dict[str, Any], ...] | list[dict[str, Any]] = ()  # error fields, in order
    times: dict[str, tuple[float, int]] | None = None
    elements: bool = False  # `payload` is unbatched elements in `slot` (`layout.write_elements`)
    observed: bytes = b""  # counts and timeline events since the worker's last answer


@dataclass(frozen=True)
class Failure:
    task_id: int  # -1: the worker failed to start
    fields: dict[str, Any]


def encode_task(
    task_id: int, epoch: int, records: bytes, skips: bytes | None, freed: list[int]
) -> bytes:
    """A task (int64 record indices, optional int64 skips), with slots freed since the last
    message to this worker."""
    nskips = -1 if skips is None else len(skips) // 8
    return b"".join(
        (
            _TASK.pack(b"T", task_id, epoch, len(records) // 8, nskips, len(freed)),
            struct.pack(f"<{len(freed)}i", *freed),
            records,
            skips or b"",
        )
    )


def encode_free(freed: list[int]) -> bytes:
    return _FREE + struct.pack(f"<{len(freed)}i", *freed)


def encode_released(nbytes: int) -> bytes:
    return _RELEASED + struct.pack("<q", nbytes)


def encode_spill(task_id: int) -> bytes:
    return _SPILL + struct.pack("<q", task_id)


def encode_start(start: Start) -> bytes:
    return b"B" + pickle.dumps(start, protocol=pickle.HIGHEST_PROTOCOL)


def encode_stop() -> bytes:
    return _STOP


def decode(
    message: bytes,
) -> tuple[list[Free], Task | Start | Stop | Released | Spill | None]:
    """What the parent sent: the slots it freed, and the task, start, stop, release or spill
    (or None)."""
    kind = message[:1]
    if kind == b"T":
        _, task_id, epoch, records, skips, nfreed = _TASK.unpack_from(message)
        at = _TASK.size
        freed = [Free(slot) for slot in struct.unpack_from(f"<{nfreed}i", message, at)]
        at += 4 * nfreed
        indices = message[at : at + 8 * records]
        at += 8 * records
        return freed, Task(
            task_id, epoch, indices, None if skips < 0 else message[at : at + 8 * skips]
        )
    if kind == _FREE:
        return [
            Free(slot) for slot in struct.unpack(f"<{(len(message) - 1) // 4}i", message[1:])
        ], None
    if kind == _STOP:
        return [], Stop()
    if kind == _RELEASED:
        return [], Released(struct.unpack("<q", message[1:9])[0])
    if kind == _SPILL:
        return [], Spill(struct.unpack("<q", message[1:9])[0])
    if kind == b"B":
        return [], pickle.loads(message[1:])
    raise ValueError(f"unknown message kind {kind!r} from the parent")


class AnswerMemo:
    """What one worker's last answer sent (the encoder's side) or meant (the decoder's):
    its layout and its stage labels, so the next answer can say "the same"."""

    def __init__(self) -> None:
        self.layout: Any = None
        self.layout_bytes = b""
        self.labels: tuple[str, ...] = ()


def encode_answer(answer: Answer, memo: AnswerMemo) -> bytes:
    """`answer` as bytes (pickled whole unless it lives in a slot with nothing but its layout
    and times to say). Raises if its payload cannot be pickled, before anything is sent."""
    if (
        answer.slot is None
        or answer.units is not None
        or answer.outs is not None
        or answer.last is not None
        or answer.skipped
    ):
        return pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    layout = pickle.dumps(answer.payload, protocol=pickle.HIGHEST_PROTOCOL)
    if layout == memo.layout_bytes:
        layout = b""
    else:  # a layout with values in it is sent every time: two batches must not share them
        memo.layout_bytes = layout if _reusable(answer) else b""
    times = answer.times or {}
    labels_now = tuple(times)
    labels = b""
    if labels_now != memo.labels:
        memo.labels = labels_now
        labels = pickle.dumps(labels_now, protocol=pickle.HIGHEST_PROTOCOL)
    values = struct.pack(
        f"<{len(times)}d{len(times)}q",
        *(t for t, _ in times.values()),
        *(n for _, n in times.values()),
    )
    segment = answer.new_segment.encode() if answer.new_segment else b""
    return b"".join(
        (
            _ANSWER.pack(
                b"A",
                answer.task_id,
                answer.size,
                answer.slot,
                answer.final,
                answer.elements,
                len(segment),
                len(layout),
                len(labels),
                len(values),
                len(answer.observed),
            ),
            segment,
            layout,
            labels,
            values,
            answer.observed,
        )
    )


def _reusable(answer: Answer) -> bool:
    """Whether the parent may read the same layout object for another answer: a batch's, with
    no value travelling in it (an inline leaf, such as an object array, must not be shared by
    two batches; unbatched elements' layouts always carry their shapes)."""
    return not answer.elements and all(spec[0] != "inline" for spec in answer.payload[1])


def decode_result(message: bytes | memoryview, memo: AnswerMemo) -> Any:
    """What a worker sent: an `Answer` (packed or pickled), a `Failure` or `Ready`."""
    if message[:1] != b"A":
        return pickle.loads(message)
    (_, task_id, size, slot, final, elements, nsegment, nlayout, nlabels, nvalues, nobserved) = (
        _ANSWER.unpack_from(message)
    )
    at = _ANSWER.size
    segment = bytes(message[at : at + nsegment]).decode() if nsegment else None
    at += nsegment
    if nlayout:
        memo.layout = pickle.loads(message[at : at + nlayout])
    at += nlayout
    if nlabels:
        memo.labels = pickle.loads(message[at : at + nlabels])
    at += nlabels
    labels = memo.labels
    times = None
    if labels:
        values = struct.unpack_from(f"<{len(labels)}d{len(labels)}q", message, at)
        times = dict(zip(labels, zip(values[: len(labels)], values[len(labels) :])))
    at += nvalues
    observed = bytes(message[at : at + nobserved])
    return Answer(
        task_id,
        memo.layout,
        size,
        None,
        None,
        None,
        final,
        slot,
        segment,
        (),
        times,
        elements,
        observed,
    )
