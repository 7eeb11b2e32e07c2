"""Iterator state: a small, versioned, JSON-serialisable description of a cursor.

>>> state = {"version": 1, "fingerprint": "3f2a...", "epoch": 2, "base": 0, "hosts": 4,
...          "host": 1, "consumed": 4096}
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tpufeed.errors import StateError
from tpufeed.order import Cursor

STATE_VERSION = 1
_CURSOR_KEYS = ("epoch", "base", "hosts", "host", "consumed")


def fingerprint(description: Any) -> str:
    """A short stable hash of a JSON-able pipeline description."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_to_dict(cursor: Cursor, fingerprint_: str) -> dict[str, Any]:
    state: dict[str, Any] = {"version": STATE_VERSION, "fingerprint": fingerprint_}
    for key in _CURSOR_KEYS:
        state[key] = getattr(cursor, key)
    return state


def state_from_dict(state: Any, expected_fingerprint: str) -> Cursor:
    """Validates `state` (as returned by `get_state`) and returns its cursor."""
    if isinstance(state, (str, bytes)):
        try:
            state = json.loads(state)
        except ValueError as e:
            raise StateError(f"iterator state is not valid JSON: {e}") from None
    if not isinstance(state, dict):
        raise StateError(f"iterator state must be a dict, got {type(state).__name__}")
    version = state.get("version")
    if version != STATE_VERSION:
        raise StateError(
            f"iterator state has version {version!r}; this tpufeed reads version {STATE_VERSION}")
    if state.get("fingerprint") != expected_fingerprint:
        raise StateError(
            f"iterator state belongs to another dataset or pipeline (fingerprint "
            f"{state.get('fingerprint')!r}, this dataset's is {expected_fingerprint!r}): "
            "the source, shuffle seed, transforms and batching must be the same to resume")
    values = {}
    for key in _CURSOR_KEYS:
        value = state.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise StateError(f"iterator state field {key!r} must be a non-negative int, got {value!r}")
        values[key] = value
    if values["hosts"] < 1 or values["host"] >= values["hosts"]:
        raise StateError(f"iterator state has host {values['host']} of {values['hosts']} hosts")
    return Cursor(**values)
