"""Sequence packing for language models: several sequences per fixed-length row.

Each output row has `length` tokens, `segment_ids` (1, 2, ... per sequence in the row, 0 on
padding) and `positions` (0, 1, ... restarting at every segment). A sequence longer than
`length` is split into pieces, each its own segment. Rows are filled over `max_open` open rows
by the packers of `Dataset.pack`, first-fit (tpufeed.ops.first_fit) or, with
`method="best_fit"`, best-fit (tpufeed.ops.best_fit), in input order: the result is a pure
function of the input. In a pipeline, prefer `Dataset.pack`, which packs
across batches into rows of one shape; this map packs what one element holds.

>>> packed = pack_sequences([np.array([5, 6, 7]), np.array([8, 9])], length=4)
>>> packed["tokens"].tolist(), packed["segment_ids"].tolist()
([[5, 6, 7, 0], [8, 9, 0, 0]], [[1, 1, 1, 0], [1, 1, 0, 0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.first_fit import Row, Segment, split, write_rows
from tpufeed.ops.pack import packer_for

__all__ = ["PackSequences", "pack_sequences"]


def pack_sequences(
    sequences: Sequence[Any],
    length: int,
    pad_id: int = 0,
    max_open: int = 8,
    method: str = "first_fit",
) -> dict[str, np.ndarray]:
    """Packs 1-D token sequences into int32 arrays [rows, length]: tokens, segment_ids, positions.

    The same packers as `Dataset.pack` (`method="first_fit"` or `"best_fit"`), over one list.
    """
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise InvalidArgumentError(f"pack length must be a positive int, got {length!r}")
    if not isinstance(max_open, int) or isinstance(max_open, bool) or max_open < 1:
        raise InvalidArgumentError(f"max_open must be a positive int, got {max_open!r}")
    packer = packer_for(method, "pack_sequences")([length], max_open)
    rows: list[Row] = []
    for i, seq in enumerate(sequences):
        seq = np.asarray(seq)
        if seq.ndim != 1:
            raise ValueError(f"sequence {i} has shape {seq.shape}; packing needs 1-D sequences")
        if seq.size:
            for piece in split((seq,), [length], cut=False):
                rows += packer.add(Segment(piece, i))
    rows += packer.close_all()
    out = write_rows(rows, ["tokens"], [length], [np.dtype(np.int32)], len(rows))
    if pad_id:
        out["tokens"][out["tokens_segment_ids"] == 0] = pad_id
    return {
        "tokens": out["tokens"],
        "segment_ids": out["tokens_segment_ids"],
        "positions": out["tokens_positions"],
    }


@dataclass(frozen=True)
class PackSequences:
    """A map packing the sequences of one element into rows of `length` tokens.

    element[key] is a list of 1-D sequences, one 1-D sequence, or a padded 2-D batch with
    lengths in element[f"{key}_length"] (what `ByteTokenizer(pad_to=...)` then `batch` give).
    The result is {key, "segment_ids", "positions"}, each [rows, length]; `num_rows` pads to a
    fixed row count (and raises if more are needed); `as_records=True` returns one dict per row
    instead, which a `tpufeed build --transform` writes as separate records. `method`:
    `"first_fit"` or `"best_fit"`, as `Dataset.pack`'s.

    >>> ds.map(ByteTokenizer(pad_to=512)).batch(64).map(PackSequences(512))  # doctest: +SKIP
    """

    length: int
    key: str = "tokens"
    pad_id: int = 0
    max_open: int = 8
    num_rows: int | None = None
    as_records: bool = False
    method: str = "first_fit"

    def __post_init__(self) -> None:
        if not isinstance(self.length, int) or isinstance(self.length, bool) or self.length < 1:
            raise InvalidArgumentError(
                f"PackSequences length must be a positive int, got {self.length!r}"
            )
        if self.num_rows is not None and (not isinstance(self.num_rows, int) or self.num_rows < 1):
            raise InvalidArgumentError(f"num_rows must be a positive int, got {self.num_rows!r}")
        packer_for(self.method, "PackSequences")

    def _sequences(self, element: dict[str, Any]) -> list[np.ndarray]:
        if not isinstance(element, dict) or self.key not in element:
            got = sorted(element) if isinstance(element, dict) else type(element).__name__
            raise KeyError(f"PackSequences: key {self.key!r} is missing (the element has {got})")
        value = element[self.key]
        if isinstance(value, (list, tuple)):
            return [np.asarray(v) for v in value]
        value = np.asarray(value)
        if value.ndim == 1:
            return [value]
        if value.ndim != 2:
            raise ValueError(
                f"PackSequences: {self.key!r} has shape {value.shape}; expected a "
                "sequence, a list of them or a padded 2-D batch"
            )
        lengths_key = f"{self.key}_length"
        if lengths_key not in element:
            return list(value)
        lengths = np.asarray(element[lengths_key]).reshape(-1)
        if (
            lengths.size != value.shape[0]
            or (lengths > value.shape[1]).any()
            or (lengths < 0).any()
        ):
            raise ValueError(
                f"PackSequences: {lengths_key!r} {lengths.tolist()} does not fit "
                f"{self.key!r} of shape {value.shape}"
            )
        return [row[:n] for row, n in zip(value, lengths.tolist())]

    def __call__(self, element: dict[str, Any]) -> Any:
        packed = pack_sequences(
            self._sequences(element), self.length, self.pad_id, self.max_open, self.method
        )
        rows = packed["tokens"].shape[0]
        if self.num_rows is not None:
            if rows > self.num_rows:
                raise ValueError(
                    f"PackSequences: the sequences need {rows} rows of "
                    f"{self.length}, num_rows is {self.num_rows}"
                )
            pad = ((0, self.num_rows - rows), (0, 0))
            packed = {
                "tokens": np.pad(packed["tokens"], pad, constant_values=self.pad_id),
                "segment_ids": np.pad(packed["segment_ids"], pad),
                "positions": np.pad(packed["positions"], pad),
            }
        out = {
            self.key: packed["tokens"],
            "segment_ids": packed["segment_ids"],
            "positions": packed["positions"],
        }
        if self.as_records:
            return [{k: v[r] for k, v in out.items()} for r in range(out[self.key].shape[0])]
        return out
