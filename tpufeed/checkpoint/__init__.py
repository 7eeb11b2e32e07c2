"""Orbax checkpointing of tpufeed iterators: the data position saved next to the model.

`CheckpointSave(it)` and `CheckpointRestore(it)` are Orbax checkpoint args, registered with
`CheckpointHandler`, so `ocp.args.Composite` finds the handler by itself. Each process saves
its own `get_state()` as `<item>/process_<index>-of-<count>.json`. Restoring on the same
process count gives each process its own state back (exact); on another count every process
reads all the saved states and passes the list to `set_state`, which resumes the rest of the
epoch exactly once (filters, flat_map, pack and mixtures included). Every process must be able
to read the checkpoint directory (a shared file system or gs://, as Orbax itself needs).

Orbax is imported on first use of these names (`pip install tpufeed[orbax]`): they live in
`orbax_handler.py`, and `state_files.py` lays the states out in the item's directory.

>>> import orbax.checkpoint as ocp, tpufeed                                # doctest: +SKIP
>>> it = ds.to_jax()                    # or iter(ds), ds.iterator()       # doctest: +SKIP
>>> mgr = ocp.CheckpointManager("/ckpt")                                   # doctest: +SKIP
>>> mgr.save(step, args=ocp.args.Composite(model=ocp.args.StandardSave(params),
...          data=tpufeed.checkpoint.CheckpointSave(it)))                  # doctest: +SKIP
>>> mgr.restore(mgr.latest_step(), args=ocp.args.Composite(model=ocp.args.StandardRestore(params),
...             data=tpufeed.checkpoint.CheckpointRestore(it)))            # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tpufeed.errors import missing_dependency

if TYPE_CHECKING:
    from tpufeed.checkpoint.orbax_handler import (
        CheckpointHandler,
        CheckpointRestore,
        CheckpointSave,
    )

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'tpufeed.checkpoint' has no attribute {name!r}")
    try:
        module = importlib.import_module("tpufeed.checkpoint.orbax_handler")
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("orbax", "etils", "jax"):
            raise missing_dependency("orbax-checkpoint", "orbax") from e
        raise
    return getattr(module, name)
