"""Which process of a multi-process run this is: jax.distributed's, or torch.distributed's.

A run is jax's when `jax.distributed` is initialised, torch's when `torch.distributed` is and
jax's is not. Neither framework is imported to find out: one that is not imported yet cannot be
initialised.
"""

from __future__ import annotations

import sys

__all__ = ["initialised_runtime", "process_of_run"]


def initialised_runtime() -> str | None:
    """ "jax", "torch", or None where neither jax.distributed nor torch.distributed runs."""
    if "jax" in sys.modules and _jax_initialised():
        return "jax"
    if "torch" in sys.modules and _torch_initialised():
        return "torch"
    return None


def process_of_run() -> tuple[int, int]:
    """(index, count) of this process: torch.distributed's rank and world size in a torch run,
    else jax's process index and count (0 and 1 without jax)."""
    if initialised_runtime() == "torch":
        import torch.distributed as dist

        return dist.get_rank(), dist.get_world_size()
    try:
        import jax
    except ImportError:
        return 0, 1
    return jax.process_index(), jax.process_count()


def _jax_initialised() -> bool:
    try:
        from jax._src.distributed import global_state
    except ImportError:
        return False
    return global_state.client is not None


def _torch_initialised() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
