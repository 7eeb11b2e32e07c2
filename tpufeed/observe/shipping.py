"""What a worker ships of its counts and timeline with an answer, and the parent's receipt.

One blob per answer, empty (zero bytes) when the worker counted nothing and records no
timeline: the common case costs the answer nothing but a length.
"""

from __future__ import annotations

import pickle

from tpufeed.observe import counts, timeline


def pack() -> bytes:
    """This worker's counts and events since its last answer ("" if none), with the names of
    its process tracks ("tpufeed worker N") when there are events."""
    increments = counts.drain()
    events = timeline.drain()
    if not increments and not events:
        return b""
    recording = timeline.recording()
    names = recording.processes if events and recording is not None else {}
    return pickle.dumps((increments, events, names), protocol=pickle.HIGHEST_PROTOCOL)


def receive(blob: bytes) -> dict[str, int]:
    """A worker's blob, counted and recorded in this process (the parent); its increments."""
    if not blob:
        return {}
    increments, events, names = pickle.loads(blob)
    if increments:
        counts.add(increments)
    if events:
        recording = timeline.recording()
        if recording is not None:
            recording.extend(events)
            for pid, name in names.items():
                recording.name_process(pid, name)
    return increments
