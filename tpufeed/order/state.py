"""Iterator state: a small, versioned, JSON-serialisable description of a cursor.

>>> state = {"version": 2, "fingerprint": "3f2a...", "epoch": 2, "base": 0, "hosts": 4,
...          "host": 1, "consumed": 4096}

Only what differs from a plain cursor is written: `emitted` (outputs of the next unit already
delivered, after a `flat_map`), `layers` (what stops out of lockstep left, each as
[base, hosts, least consumed, [each host's consumed minus the least]]) and `carries`
([position, outputs delivered] pairs this host finishes first), and the state of stream stages
that hold elements between items (`pack`: the segments waiting in its rows, named by epoch
position). Version 1 states (before those existed) still load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tpufeed.order.cursor import Cursor, Layer
from tpufeed.errors import StateError

STATE_VERSION = 2
_READABLE = (1, 2)
_CURSOR_KEYS = ("epoch", "base", "hosts", "host", "consumed")
STAGE_KEYS = ("pack",)  # stream stages that hold elements between items
T = TypeVar("T")


def fingerprint(description: Any) -> str:
    """A short stable hash of a JSON-able pipeline description."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_to_dict(cursor: Cursor, fingerprint_: str,
                  stages: dict[str, Any] | None = None) -> dict[str, Any]:
    """The state of a cursor, and of the stream stages that hold elements (`stages`, by name)."""
    state: dict[str, Any] = {"version": STATE_VERSION, "fingerprint": fingerprint_}
    for key in _CURSOR_KEYS:
        state[key] = getattr(cursor, key)
    if cursor.emitted:
        state["emitted"] = cursor.emitted
    if cursor.layers:
        state["layers"] = [_layer_to_list(layer) for layer in cursor.layers]
    if cursor.carries:
        state["carries"] = [list(carry) for carry in cursor.carries]
    if stages:
        state.update({key: value.to_dict() if hasattr(value, "to_dict") else value
                      for key, value in stages.items()})
    return state


def stages_from_dict(state: Any) -> dict[str, Any] | None:
    """The stream stages' part of a state (each stage checks its own)."""
    if isinstance(state, (str, bytes)):
        state = json.loads(state)
    found = {key: state[key] for key in STAGE_KEYS if key in state}
    for key, value in found.items():
        if not isinstance(value, dict):
            raise StateError(f"iterator state field {key!r} must be a dict, got {value!r}")
    return found or None


def parse_state(state: Any) -> dict[str, Any]:
    """`state` as a dict: given as one, or as its JSON text; StateError otherwise."""
    if isinstance(state, (str, bytes)):
        try:
            state = json.loads(state)
        except (ValueError, RecursionError) as e:
            raise StateError(f"iterator state is not valid JSON: {e}") from None
    if not isinstance(state, dict):
        raise StateError(f"iterator state must be a dict, got {type(state).__name__}")
    return state


def state_from_dict(state: Any, expected_fingerprint: str) -> Cursor:
    """Validates `state` (as returned by `get_state`) and returns its cursor."""
    state = parse_state(state)
    version = state.get("version")
    if version not in _READABLE:
        raise StateError(
            f"iterator state has version {version!r}; this tpufeed reads versions "
            f"{', '.join(map(str, _READABLE))}")
    if state.get("fingerprint") != expected_fingerprint:
        raise StateError(
            f"iterator state belongs to another dataset or pipeline (fingerprint "
            f"{state.get('fingerprint')!r}, this dataset's is {expected_fingerprint!r}): "
            "the source, shuffle seed, transforms and batching must be the same to resume")
    values = {key: _count(state.get(key), key) for key in _CURSOR_KEYS}
    if values["hosts"] < 1 or values["host"] >= values["hosts"]:
        raise StateError(f"iterator state has host {values['host']} of {values['hosts']} hosts")
    emitted = _count(state.get("emitted", 0), "emitted")
    layers = tuple(_layer_from_list(item) for item in _list(state.get("layers", []), "layers"))
    carries = tuple(_carry(item) for item in _list(state.get("carries", []), "carries"))
    return Cursor(**values, emitted=emitted, layers=layers, carries=carries)


def states_from_list(states: Sequence[Any], expected_fingerprint: str) -> list[Cursor]:
    """The cursors of a list of states (one per host), each validated, naming a bad one."""
    return parse_each(states, lambda state: state_from_dict(state, expected_fingerprint))


def parse_each(states: Sequence[Any], parse: Callable[[Any], T]) -> list[T]:
    """`parse` of each of a list of states (one per host); a StateError names the bad one."""
    if not states:
        raise StateError("an empty list of iterator states: pass every host's get_state()")
    parsed = []
    for i, state in enumerate(states):
        try:
            parsed.append(parse(state))
        except StateError as e:
            raise StateError(f"state {i} of the list: {e}") from None
    return parsed


def _layer_to_list(layer: Layer) -> list[Any]:
    least = min(layer.consumed)
    return [layer.base, layer.hosts, least, [c - least for c in layer.consumed]]


def _layer_from_list(item: Any) -> Layer:
    if not (isinstance(item, list) and len(item) == 4 and isinstance(item[3], list)):
        raise StateError(f"iterator state field 'layers' holds {item!r}, not "
                         "[base, hosts, least, [consumed - least, ...]]")
    base, hosts, least = (_count(v, "layers") for v in item[:3])
    consumed = tuple(least + _count(v, "layers") for v in item[3])
    if hosts < 1 or len(consumed) != hosts:
        raise StateError(f"iterator state field 'layers' holds {len(consumed)} counts for "
                         f"{hosts} hosts")
    return Layer(base, hosts, consumed)


def _carry(item: Any) -> tuple[int, int]:
    if not (isinstance(item, list) and len(item) == 2):
        raise StateError(f"iterator state field 'carries' holds {item!r}, not [position, delivered]")
    return _count(item[0], "carries"), _count(item[1], "carries")


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise StateError(f"iterator state field {key!r} must be a list, got {value!r}")
    return value


def _count(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StateError(f"iterator state field {key!r} must be a non-negative int, got {value!r}")
    return value
