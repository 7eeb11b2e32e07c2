"""How `tpufeed.checkpoint` lays out iterator states in a checkpoint directory.

One JSON file per process, `process_<index>-of-<count>.json`, each written under a temporary
name and then renamed, so a reader sees a whole state or none. Every process can list and read
all of them: restoring on the same process count takes this process's own file, restoring on
another count takes every file (tpufeed's elastic resume needs all of them).

Paths are `pathlib.Path` or `etils.epath.Path` (what Orbax hands a handler; gs:// included):
only `/`, `glob`, `exists`, `read_text`, `write_text` and `rename` are used.

>>> write_state(Path("ckpt/data"), it.get_state(), index=0, count=2)   # doctest: +SKIP
>>> it.set_state(states_to_restore(Path("ckpt/data"), index=0, count=3))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
from typing import Any

from tpufeed.errors import InvalidArgumentError, StateError

_NAME = re.compile(r"process_(\d+)-of-(\d+)\.json")


def state_file_name(index: int, count: int) -> str:
    """The name of process `index`'s state among `count` processes."""
    return f"process_{index}-of-{count}.json"


def write_state(directory: Any, state: Any, index: int, count: int) -> Any:
    """Writes one process's state atomically (temporary name, then rename); returns the path."""
    try:
        text = json.dumps(state, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"the iterator's get_state() returned {type(state).__name__} "
            f"that JSON cannot hold, so it cannot be saved to {directory}: "
            f"{e}"
        ) from e
    path = directory / state_file_name(index, count)
    temporary = directory / f".{path.name}.tmp"
    temporary.write_text(text)
    temporary.rename(path)
    return path


def saved_count(directory: Any) -> int:
    """How many processes saved states in `directory`, checking that all of them did."""
    found: dict[int, set[int]] = {}
    for path in directory.glob("process_*-of-*.json"):
        match = _NAME.fullmatch(path.name)
        if match:
            found.setdefault(int(match[2]), set()).add(int(match[1]))
    if not found:
        raise StateError(
            f"no tpufeed iterator state in {directory}: expected files "
            "process_<index>-of-<count>.json written by tpufeed.checkpoint."
            "CheckpointSave (was this item saved by another handler?)"
        )
    if len(found) > 1:
        raise StateError(
            f"{directory} holds iterator states of runs with "
            f"{' and '.join(map(str, sorted(found)))} processes: save each "
            "checkpoint to a directory of its own"
        )
    ((count, indices),) = found.items()
    missing = sorted(set(range(count)) - indices)
    if missing:
        raise StateError(
            f"{directory} lacks the iterator states of process(es) "
            f"{', '.join(map(str, missing))} of {count} "
            f"(e.g. {state_file_name(missing[0], count)}): the checkpoint is "
            "incomplete"
        )
    return count


def read_state(directory: Any, index: int, count: int) -> Any:
    """The state process `index` of `count` saved in `directory`."""
    path = directory / state_file_name(index, count)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise StateError(
            f"no iterator state {path}: process {index} of {count} did not save one here"
        ) from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise StateError(f"{path} is not a tpufeed iterator state: {e}") from None


def states_to_restore(directory: Any, index: int, count: int) -> Any:
    """What process `index` of `count` passes to `set_state`: its own state when the saving
    run had as many processes, otherwise the list of every process's state."""
    saved = saved_count(directory)
    if saved == count:
        return read_state(directory, index, count)
    return [read_state(directory, i, saved) for i in range(saved)]
