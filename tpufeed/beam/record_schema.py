"""The build's schema check: every record has the keys and kinds of value of the dataset's
first record, as a batch needs (a record with an extra key, or a str where the others have an
int, fails only when a batch meets it, at training time).

The reference is the first record the transforms make of the first block, found before the
build starts (`first_record_schema`); each worker checks its records against it, and one that
differs is a bad record: it stops the build, named by file and line, or with `--max-bad` it is
skipped and counted. Lengths may differ (ragged arrays are what padding and packing are for);
the number of dimensions and the dtype may not.

>>> schema = RecordSchema.of({"id": 1, "v": np.zeros(3, np.float32)}, "in.jsonl line 1")
>>> schema.mismatch({"id": 2, "v": np.zeros(5, np.float32)}) is None
True
>>> schema.mismatch({"id": "2", "v": np.zeros(5, np.float32)})
"key 'id' is str '2', but it is int in the first record (in.jsonl line 1)"
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tpufeed.beam.block_plan import Block, BlockStart
from tpufeed.beam.blocks import read_block
from tpufeed.beam.inputs import Malformed
from tpufeed.beam.user_transforms import TransformChain, normalize_record

__all__ = ["RecordSchema", "first_record_schema"]

_SEARCH_RECORDS = 1000  # input records read, at most, to find the first good one


def value_kind(value: Any) -> str:
    """What a value is, as far as batching goes: its type, or an array's dtype and dims."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype.name} array of {value.ndim} dims"
    if isinstance(value, np.generic):
        return f"{value.dtype.name} array of 0 dims"  # stored as one
    return type(value).__name__


class RecordSchema:
    """The keys and value kinds of a reference record (a dict), or its type (bytes)."""

    def __init__(self, kinds: dict[str, str] | str, origin: str):
        self.kinds, self.origin = kinds, origin

    @classmethod
    def of(cls, record: Any, origin: str) -> RecordSchema:
        if isinstance(record, dict):
            return cls({k: value_kind(v) for k, v in record.items()}, origin)
        return cls(type(record).__name__, origin)

    def mismatch(self, record: Any) -> str | None:
        """None if `record` has the reference's keys and value kinds, else what differs."""
        kinds = self.kinds
        if not isinstance(kinds, dict) or not isinstance(record, dict):
            got = "a dict" if isinstance(record, dict) else type(record).__name__
            want = "a dict" if isinstance(kinds, dict) else kinds
            return (
                None
                if got == want
                else f"the record is {got}, but the first record ({self.origin}) is {want}"
            )
        if record.keys() != kinds.keys():
            return (
                f"the record has keys {sorted(record)}, but the first record ({self.origin}) has "
                f"{sorted(kinds)}"
            )
        for key, value in record.items():
            kind = value_kind(value)
            if kind != kinds[key]:
                return (
                    f"key {key!r} is {kind} {_short(value)}, but it is {kinds[key]} in the "
                    f"first record ({self.origin})"
                )
        return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def first_record_schema(blocks: Sequence[Block], transforms: Sequence[str]) -> RecordSchema | None:
    """The schema of the first record the transforms make of the first block (skipping
    malformed records and those a transform fails on or filters out: the build reports
    them); None if its first records hold no good one."""
    if not blocks:
        return None
    chain, first = TransformChain(transforms), blocks[0]
    records = itertools.islice(read_block(first, BlockStart()), _SEARCH_RECORDS)
    for index, origin, record in records:
        if isinstance(record, Malformed):
            continue
        try:
            outputs = [normalize_record(r) for r in chain(record, first.file_index, index)]
        except Exception:  # noqa: BLE001 - the build names this record's failure itself
            continue
        if outputs:
            return RecordSchema.of(outputs[0], origin)
    return None
