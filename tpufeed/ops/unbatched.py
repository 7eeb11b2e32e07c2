"""The stream stage of a pipeline that neither batches nor packs: each element is an item."""

from __future__ import annotations

from typing import ClassVar

from tpufeed.errors import StateError
from tpufeed.ops.base import End, Item, PieceLike, Reread


class Unbatched:
    """Hands out a piece's elements one by one, each with the cursor right after it."""

    key: ClassVar[str] = "elements"

    def push(self, piece: PieceLike) -> list[Item]:
        cursor_after = piece.cursor_after
        return [(element, cursor_after(i), -1, None) for i, element in enumerate(piece.payload)]

    def end_epoch(self, end: End) -> list[Item]:
        return []

    def get_state(self) -> None:
        return None

    def set_state(self, saved: object, reread: Reread) -> None:
        raise StateError(
            f"an unbatched pipeline holds nothing between items, but the state gives it {saved!r}"
        )
