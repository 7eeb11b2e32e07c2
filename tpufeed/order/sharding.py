"""Which share of every epoch this host reads: explicit, or jax's process index and count."""

from __future__ import annotations

from dataclasses import dataclass

from tpufeed.errors import InvalidArgumentError


@dataclass(frozen=True)
class Sharding:
    """Which share of every epoch this host reads; None means "ask jax when iterating"."""

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
        """(index, count), the missing parts from jax.process_index()/process_count()."""
        index, count = self.index, self.count
        if index is None or count is None:
            jax_index, jax_count = _jax_process()
            index = jax_index if index is None else index
            count = jax_count if count is None else count
        if index >= count:
            raise InvalidArgumentError(f"shard index {index} is not below shard count {count}")
        return index, count


def _jax_process() -> tuple[int, int]:
    try:
        import jax
    except ImportError:
        return 0, 1
    return jax.process_index(), jax.process_count()
