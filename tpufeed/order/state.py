"""Iterator state: a small, versioned, JSON-serialisable description of a position.

>>> state = {"version": 3, "fingerprint": "3f2a...", "epoch": 2, "base": 0, "hosts": 4,
...          "host": 1, "consumed": 4096, "emitted": 0, "layers": "[]", "carries": "[]"}

Every state of one pipeline's iterator has the same keys and value types, from the first
`get_state()` on, so that a checkpoint library restoring into a template of the first state
(Orbax's PyTree checkpointing, Grain's `assert_equal_output_after_checkpoint`) finds the same
structure at every step. Besides the cursor: `emitted` (outputs of the next unit already
delivered, after a `flat_map`), `layers` (what stops out of lockstep left, each as
[base, hosts, least consumed, [each host's consumed minus the least]]) and `carries`
([position, outputs delivered] pairs this host finishes first); lists whose length changes
from step to step are written as their compact JSON text, a string. The stream stage that
holds elements between items writes its part in every state too (`pack`: the segments waiting
in its rows, named by epoch position; none held at first). A mixture writes `mix`: each
component's cursor, the count taken from each, and the weights (an older state without them
resumes, but not into other weights). A pipeline that reads files writes `shards` in
every state: [a digest of each file's name, size and version (modification time, GCS
checksum or generation, manifest CRC32C), the newest modification time], so a state is refused
where its files changed (`check_shards`), unless accepted knowingly (`accept_changed_shards`).
Older states still load: version 1 (before `shards`), version 2 (with or without `shards`;
`emitted`, `layers`, `carries` and the stage's part only where they held something, the lists
as lists).

Reading is done once, where a state enters (tpufeed.run.resume): `load_state`, `check_header`,
then `cursor_from_state` or `mix_cursor_from_state`; each stage reads its own part.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from tpufeed.errors import StateError
from tpufeed.order.cursor import Cursor, Layer, MixCursor
from tpufeed.order.pipeline_parts import PARTS_KEY, differing_parts

STATE_VERSION = 3
_READABLE = (1, 2, 3)
_CURSOR_KEYS = ("epoch", "base", "hosts", "host", "consumed")
SHARDS_KEY = "shards"


class ShardStamp(NamedTuple):
    """What a state remembers of one file: its name, size, a version that changes with its
    contents (a local file's mtime_ns, a gs:// object's CRC32C or generation, a manifest's
    CRC32C), and when it was last written (ns since the epoch; 0 where unknown)."""

    name: str
    size: int
    version: int
    written_ns: int


class StageState(Protocol):
    """What a stream stage holds at one item, written into the state under the stage's key."""

    def to_dict(self) -> dict[str, Any]: ...


def fingerprint(description: Any) -> str:
    """A short stable hash of a JSON-able pipeline description."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def weighed_fingerprint(described: str, weights: Sequence[float]) -> str:
    """The fingerprint of a mixture with `weights`, all else it is (components, seed, stages
    after mix) given as `described`, the JSON text of a dict."""
    return fingerprint({**json.loads(described), "weights": list(weights)})


def shards_seen(stamps: Sequence[ShardStamp]) -> list[Any] | None:
    """A state's record of the files it was taken on: [16 hex digits of a digest of every
    stamp, the newest `written_ns`]; None for a source without files."""
    if not stamps:
        return None
    # By file name, not path: a dataset moved or copied elsewhere (times kept) is the same.
    text = "\n".join(f"{s.name.rsplit('/', 1)[-1]}\t{s.size}\t{s.version}" for s in stamps)
    return [hashlib.sha256(text.encode()).hexdigest()[:16], max(s.written_ns for s in stamps)]


def check_shards(state: Mapping[str, Any], stamps: Sequence[ShardStamp]) -> None:
    """Raises StateError, naming the changed files where it can, unless the files the state
    was taken on (its `shards`) are `stamps`. A state without that record (older, or
    accepted with `accept_changed_shards`) is not checked."""
    saved = state.get(SHARDS_KEY)
    if saved is None:
        return
    if not (
        isinstance(saved, list)
        and len(saved) == 2
        and isinstance(saved[0], str)
        and isinstance(saved[1], int)
        and not isinstance(saved[1], bool)
    ):
        raise StateError(
            f"iterator state field 'shards' must be [digest, newest write time], got {saved!r}"
        )
    now = shards_seen(stamps)
    if now is None or now[0] == saved[0]:
        return
    newer = [s.name for s in stamps if s.written_ns > saved[1]]
    which = (
        f"{', '.join(newer[:5])}{' and others' if len(newer) > 5 else ''} "
        "(written after every file the state was taken on)"
        if newer
        else f"one of its {len(stamps)} files (a size, checksum or time differs)"
    )
    raise StateError(
        f"iterator state was taken on other contents of this dataset's files: {which} "
        "changed since, so resuming would continue into records the state never counted. "
        "Restore the files, or resume into the changed files knowingly with "
        "ds.iterator(tpufeed.accept_changed_shards(state))"
    )


def accept_changed_shards(state: Any) -> Any:
    """`state` (one state, JSON text, or a list of every host's) made to resume even where the
    files it was taken on have changed since: its `shards` record is cleared.

    >>> accept_changed_shards({"version": 3, "shards": ["0123456789abcdef", 0]})["shards"]
    """
    if isinstance(state, (list, tuple)):
        return [accept_changed_shards(one) for one in state]
    state = load_state(state)
    return {**state, SHARDS_KEY: None} if SHARDS_KEY in state else dict(state)


def state_to_dict(
    cursor: Cursor,
    fingerprint_: str,
    stages: Mapping[str, StageState] | None = None,
    shards: list[Any] | None = None,
    parts: str = "",
) -> dict[str, Any]:
    """The state of a cursor, and of the stream stages that hold elements (`stages`, by key);
    `shards`: what `shards_seen` says of the files (None: the source has none); `parts`: the
    pipeline's parts (`tpufeed.order.pipeline_parts`), to name what differs if refused."""
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "fingerprint": fingerprint_,
        **cursor_fields(cursor),
    }
    if shards is not None:
        state[SHARDS_KEY] = shards
    if parts:
        state[PARTS_KEY] = parts
    if stages:
        state.update({key: value.to_dict() for key, value in stages.items()})
    return state


def mix_state_to_dict(
    cursor: MixCursor,
    fingerprint_: str,
    components: Sequence[str],
    weights: Sequence[float],
    stages: Mapping[str, StageState] | None = None,
    shards: list[Any] | None = None,
) -> dict[str, Any]:
    """The state of a mixture: each component's cursor (with the fingerprint of the component
    it belongs to), the schedule's counts, the weights (so that a mixture of other weights can
    check the rest of the state against its own), and `shards` as `state_to_dict` writes it."""
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "fingerprint": fingerprint_,
        "mix": {
            "taken": list(cursor.taken),
            "active": [int(a) for a in cursor.active],
            "weights": list(weights),
            "components": [
                {"fingerprint": f, **cursor_fields(c)} for f, c in zip(components, cursor.cursors)
            ],
        },
    }
    if shards is not None:
        state[SHARDS_KEY] = shards
    if stages:
        state.update({key: value.to_dict() for key, value in stages.items()})
    return state


def cursor_fields(cursor: Cursor) -> dict[str, Any]:
    """A cursor's own keys of a state: the same keys whatever the cursor holds."""
    fields: dict[str, Any] = {key: getattr(cursor, key) for key in _CURSOR_KEYS}
    fields["emitted"] = cursor.emitted
    fields["layers"] = list_text([_layer_to_list(layer) for layer in cursor.layers])
    fields["carries"] = list_text([list(carry) for carry in cursor.carries])
    return fields


def list_text(items: list[Any]) -> str:
    """A list of a state whose length changes from step to step, as its compact JSON text: a
    string keeps the state's structure the same at every step (`read_list` reads it back)."""
    return json.dumps(items, separators=(",", ":"))


def read_list(value: Any, key: str) -> list[Any]:
    """A list field of a state: JSON text (version 3), or a list (versions 1 and 2)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise StateError(
                f"iterator state field {key!r} must be the JSON text of a list, got {value!r}"
            ) from None
    if not isinstance(value, list):
        raise StateError(f"iterator state field {key!r} must be a list, got {value!r}")
    return value


def load_state(state: Any) -> dict[str, Any]:
    """`state` as a dict: given as one, or as its JSON text; StateError otherwise."""
    if isinstance(state, (str, bytes)):
        try:
            state = json.loads(state)
        except (ValueError, RecursionError) as e:
            raise StateError(f"iterator state is not valid JSON: {e}") from None
    if not isinstance(state, dict):
        raise StateError(f"iterator state must be a dict, got {type(state).__name__}")
    return state


def check_version(state: Mapping[str, Any]) -> None:
    """Raises unless `state` has a version this release reads."""
    version = state.get("version")
    if version not in _READABLE:
        raise StateError(
            f"iterator state has version {version!r}; this tpufeed reads versions "
            f"{', '.join(map(str, _READABLE))}"
        )


def check_header(
    state: Mapping[str, Any],
    expected_fingerprint: str,
    parts: str = "",
    stage_names: Sequence[str] = (),
) -> None:
    """Raises unless `state` has a version this release reads and belongs to this pipeline;
    one that is not a tpufeed state at all is told apart from one of another pipeline, and
    for that, the part that differs is named where the state records its `parts`."""
    if "version" not in state and "fingerprint" not in state:
        keys = ", ".join(map(repr, list(state)[:8])) or "none"
        raise StateError(
            f"iterator state is not one tpufeed wrote (no 'version' or 'fingerprint'; its keys: "
            f"{keys}): pass what it.get_state() returned, as it returned it"
        )
    check_version(state)
    if state.get("fingerprint") == expected_fingerprint:
        return
    if not isinstance(state.get("fingerprint"), str):
        raise StateError(
            f"iterator state field 'fingerprint' must be the text get_state() wrote, got "
            f"{state.get('fingerprint')!r}"
        )
    differs = differing_parts(state.get(PARTS_KEY), parts, stage_names)
    what = (
        "it differs from this one in " + ", and in ".join(differs)
        if differs
        else "the source, shuffle seed, transforms and batching must be the same to resume"
    )
    raise StateError(
        f"iterator state belongs to another dataset or pipeline (fingerprint "
        f"{state.get('fingerprint')!r}, this dataset's is {expected_fingerprint!r}): {what}"
    )


def state_from_dict(state: Any, expected_fingerprint: str) -> Cursor:
    """The cursor of a plain state (as `get_state` returns it), validated."""
    state = load_state(state)
    check_header(state, expected_fingerprint)
    return cursor_from_state(state)


def cursor_from_state(state: Mapping[str, Any]) -> Cursor:
    """The cursor that a state's own keys describe (its header already checked)."""
    values = {key: _count(state.get(key), key) for key in _CURSOR_KEYS}
    if values["hosts"] < 1 or values["host"] >= values["hosts"]:
        raise StateError(f"iterator state has host {values['host']} of {values['hosts']} hosts")
    emitted = _count(state.get("emitted", 0), "emitted")
    layers = tuple(_layer_from_list(item) for item in read_list(state.get("layers", []), "layers"))
    carries = tuple(_carry(item) for item in read_list(state.get("carries", []), "carries"))
    return Cursor(**values, emitted=emitted, layers=layers, carries=carries)


def mix_cursor_from_state(
    state: Mapping[str, Any], components: Sequence[str], labels: Sequence[str] = ()
) -> MixCursor:
    """The mixture cursor of a state (its header already checked), each component's cursor
    checked against that component's fingerprint (a StateError names it by `labels`)."""
    mix, k = state.get("mix"), len(components)
    if not (
        isinstance(mix, dict)
        and all(
            isinstance(mix.get(key), list) and len(mix[key]) == k
            for key in ("components", "taken", "active")
        )
    ):
        raise StateError(
            f"iterator state of a mixture of {k} components needs 'mix' with "
            f"'components', 'taken' and 'active' of {k} each; got {mix!r}"
        )
    cursors = []
    for i, (component, expected) in enumerate(zip(mix["components"], components)):
        component = load_state(component)
        try:
            check_header({"version": state["version"], **component}, expected)
        except StateError as error:
            name = labels[i] if i < len(labels) else f"#{i}"
            raise StateError(
                f"mixture component {name} differs from the state's: {error}"
            ) from None
        cursors.append(cursor_from_state(component))
    taken = tuple(
        t if isinstance(t, int) and not isinstance(t, bool) and t >= 0 else -1 for t in mix["taken"]
    )
    if -1 in taken or not all(a in (0, 1) for a in mix["active"]):
        raise StateError(
            f"iterator state field mix has bad counts {mix['taken']!r} or flags {mix['active']!r}"
        )
    return MixCursor(tuple(cursors), taken, tuple(bool(a) for a in mix["active"]))


def saved_weights(state: Mapping[str, Any], components: int) -> tuple[float, ...] | None:
    """The weights a mixture's state was taken with; None for a state that does not say
    (written before tpufeed recorded them). A StateError names weights that are malformed."""
    mix = state.get("mix")
    weights = mix.get("weights") if isinstance(mix, dict) else None
    if weights is None:
        return None
    if not (
        isinstance(weights, list)
        and len(weights) == components
        and all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and 0 < w <= 1 for w in weights
        )
    ):
        raise StateError(
            f"iterator state field mix.weights must be {components} weights in (0, 1], "
            f"got {weights!r}"
        )
    return tuple(float(w) for w in weights)


def _layer_to_list(layer: Layer) -> list[Any]:
    least = min(layer.consumed)
    return [layer.base, layer.hosts, least, [c - least for c in layer.consumed]]


def _layer_from_list(item: Any) -> Layer:
    if not (isinstance(item, list) and len(item) == 4 and isinstance(item[3], list)):
        raise StateError(
            f"iterator state field 'layers' holds {item!r}, not "
            "[base, hosts, least, [consumed - least, ...]]"
        )
    base, hosts, least = (_count(v, "layers") for v in item[:3])
    consumed = tuple(least + _count(v, "layers") for v in item[3])
    if hosts < 1 or len(consumed) != hosts:
        raise StateError(
            f"iterator state field 'layers' holds {len(consumed)} counts for {hosts} hosts"
        )
    return Layer(base, hosts, consumed)


def _carry(item: Any) -> tuple[int, int]:
    if not (isinstance(item, list) and len(item) == 2):
        raise StateError(
            f"iterator state field 'carries' holds {item!r}, not [position, delivered]"
        )
    return _count(item[0], "carries"), _count(item[1], "carries")


def _count(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StateError(f"iterator state field {key!r} must be a non-negative int, got {value!r}")
    return value
