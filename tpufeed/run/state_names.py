"""`state_dict()` / `load_state_dict(state)`: torch's names for `get_state()` / `set_state(state)`.

Every iterator tpufeed hands out (`iter(ds)`, a mixture's, `to_jax()`'s, `to_torch()`'s, the
`tf.data.Dataset` of `to_tf()`) saves its position with `get_state()` and restores it with
`set_state(state)`, Grain's names. PyTorch code (torchdata's `StatefulDataLoader`, Lightning,
a loop that checkpoints `{"model": model.state_dict(), "data": it.state_dict()}`) calls the same
two under torch's names; this mixin gives them, so both spellings work on every iterator.

>>> it = iter(tpufeed.Dataset.from_sequence(range(4)))  # doctest: +SKIP
>>> next(it); it.state_dict() == it.get_state()          # doctest: +SKIP
True
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["TorchStateNames"]


class _HasState(Protocol):
    def get_state(self) -> Any: ...
    def set_state(self, state: Any) -> None: ...


class TorchStateNames:
    """`state_dict()` and `load_state_dict(state)`, aliases of `get_state()` and
    `set_state(state)` (a mixin: the class gives those two)."""

    def state_dict(self: _HasState) -> Any:
        """`get_state()`, under torch's name: a small JSON-able dict."""
        return self.get_state()

    def load_state_dict(self: _HasState, state: Any) -> None:
        """`set_state(state)`, under torch's name: continues right after `state`."""
        self.set_state(state)
