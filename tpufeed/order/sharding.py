"""Which share of every epoch this host reads: explicit, or the process index and count of the
run (jax's, or torch.distributed's rank and world size: `tpufeed.order.processes`)."""

from __future__ import annotations

from dataclasses import dataclass

from tpufeed.errors import InvalidArgumentError
from tpufeed.order.processes import process_of_run


@dataclass(frozen=True)
class Sharding:
    """Which share of every epoch this host reads; None means "ask the run when iterating"
    (jax, or torch.distributed where it is initialised and jax.distributed is not)."""

    index: int | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        for name in ("index", "count"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidArgumentError(f"shard {name} must be an int, got {value!r}")
        if self.count is not None and self.count < 1:
            raise InvalidArgumentError(f"shard count must be >= 1, got {self.count}")
        if self.index is not None and self.index < 0:
            raise InvalidArgumentError(f"shard index must be >= 0, got {self.index}")
        if self.index is not None and self.count is not None and self.index >= self.count:
            raise InvalidArgumentError(
                f"shard index {self.index} is not below shard count {self.count}"
            )

    def resolve(self) -> tuple[int, int]:
        """(index, count), the missing parts from the run's process index and count."""
        index, count = self.index, self.count
        if index is None or count is None:
            run_index, run_count = process_of_run()
            index = run_index if index is None else index
            count = run_count if count is None else count
        if index >= count:
            raise InvalidArgumentError(f"shard index {index} is not below shard count {count}")
        return index, count
