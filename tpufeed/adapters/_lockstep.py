"""Whether the processes of a multi-process run get equal numbers of batches per epoch.

In SPMD training every process must take part in every step; a process whose share of an
epoch makes one batch fewer would leave the others waiting in a collective forever. Without a
filter the counts follow from the record count alone, so this is checked before the first step.
"""

from __future__ import annotations

from typing import Any

from tpufeed.errors import InvalidArgumentError
from tpufeed.order import share_size
from tpufeed.stages import FilterOp


def batches_per_host(n: int, base: int, consumed: int, hosts: int, batch_size: int,
                     drop_remainder: bool) -> list[int]:
    """Batches each host still makes in the segment starting at position `base`.

    >>> batches_per_host(9, 0, 0, 2, 5, drop_remainder=True)
    [1, 0]
    """
    counts = []
    for host in range(hosts):
        left = max(0, share_size(n, base, host, hosts) - consumed)
        counts.append(left // batch_size if drop_remainder else -(-left // batch_size))
    return counts


def check_lockstep(ds: Any, state: dict[str, Any]) -> None:
    """Raises when hosts would make different numbers of batches (no filter in the pipeline)."""
    plan = ds._plan()
    ops = plan.element_ops + plan.batch_ops
    if plan.hosts == 1 or plan.batch is None or any(isinstance(op, FilterOp) for op in ops):
        return
    n, size, drop = len(plan.source), plan.batch.batch_size, plan.batch.drop_remainder
    segments = [("the rest of this epoch", state["base"], state["consumed"])]
    if plan.epochs is None or state["epoch"] + 1 < plan.epochs:
        segments.append(("every epoch", 0, 0))
    for label, base, consumed in segments:
        counts = batches_per_host(n, base, consumed, plan.hosts, size, drop)
        if len(set(counts)) > 1:
            raise InvalidArgumentError(
                f"to_jax: in this {plan.hosts}-process run the processes would make "
                f"{counts} batches of {size} in {label} ({n} records, "
                f"drop_remainder={drop}); every process must make the same number or the run "
                "stalls in a collective. Choose a batch size or record count that gives every "
                "process's share the same number of batches")
