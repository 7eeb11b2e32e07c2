"""The Orbax handler and its save and restore args behind `tpufeed.checkpoint` (imported on first
use: it imports orbax and jax)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from tpufeed.checkpoint.state_files import states_to_restore, write_state
from tpufeed.errors import InvalidArgumentError, StateError


class CheckpointHandler(ocp.CheckpointHandler):
    """Saves each process's iterator state as its own JSON file in the item's directory, and
    restores it on any process count (see tpufeed.checkpoint)."""

    def save(
        self, directory: epath.Path, item: Any = None, args: CheckpointSave | None = None
    ) -> None:
        """Writes this process's `get_state()`; `item` is Orbax's older calling convention."""
        iterator = item if item is not None else _item_of(args, "save")
        write_state(directory, iterator.get_state(), jax.process_index(), jax.process_count())

    def restore(
        self, directory: epath.Path, item: Any = None, args: CheckpointRestore | None = None
    ) -> Any:
        """Moves the iterator to the saved position and returns it."""
        iterator = item if item is not None else _item_of(args, "restore")
        state = states_to_restore(directory, jax.process_index(), jax.process_count())
        try:
            iterator.set_state(state)
        except StateError as e:
            raise StateError(
                f"the iterator state saved in {directory} does not fit this iterator: {e}"
            ) from e
        start = getattr(iterator, "start", None)  # tpufeed's iterators: the first batch begins
        if callable(start):  # while the rest of the checkpoint (the model) restores
            start()
        return iterator

    def metadata(self, directory: epath.Path) -> None:
        """No metadata: the states are small enough to read."""
        return None

    @classmethod
    def typestr(cls) -> str:
        """The name Orbax records for this handler in a checkpoint's metadata."""
        return "tpufeed.checkpoint.CheckpointHandler"


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """Saves `item.get_state()` (a tpufeed iterator, or any object with get_state/set_state).

    >>> mgr.save(step, args=ocp.args.Composite(data=CheckpointSave(it)))   # doctest: +SKIP
    """

    item: Any

    def __post_init__(self) -> None:
        _check_has(self.item, "get_state", "CheckpointSave")


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Restores into `item` with `item.set_state(...)`: its own state on the same process
    count, the list of every process's state on another. Then `item.start()`, where it has
    one: its first batch is made while what is restored after it (the model) restores.

    >>> mgr.restore(step, args=ocp.args.Composite(data=CheckpointRestore(it)))  # doctest: +SKIP
    """

    item: Any

    def __post_init__(self) -> None:
        _check_has(self.item, "set_state", "CheckpointRestore")


def _check_has(item: Any, method: str, name: str) -> None:
    if not callable(getattr(item, method, None)):
        raise InvalidArgumentError(
            f"{name} needs an iterator with {method}() (a tpufeed "
            f"iterator, from iter(ds), ds.iterator() or ds.to_jax()), "
            f"got {type(item).__name__}: {item!r:.80}"
        )


def _item_of(args: Any, action: str) -> Any:
    if args is None:
        raise InvalidArgumentError(
            f"CheckpointHandler.{action} needs args=Checkpoint{action.capitalize()}(iterator)"
        )
    return args.item
