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

from tpufeed.beam.read.block_plan import Block, BlockStart
from tpufeed.beam.read.blocks import read_block
from tpufeed.beam.read.inputs import Malformed
from tpufeed.beam.read.user_transforms import TransformChain, normalize_record

__all__ = ["RecordSchema", "first_record_schema"]

_SEARCH_RECORDS = 1000  # input records read, at most, to find the first good one


Kind = Any  # a Python type, or (dtype, number of dimensions) for a numpy value


def value_kind(value: Any) -> Kind:
    """What a value is, as far as batching goes: its type, or an array's dtype and dims."""
    cls = type(value)
    if cls is np.ndarray:
        return value.dtype, value.ndim
    if issubclass(cls, np.generic):
        return value.dtype, 0  # stored as a 0-d array
    return cls


def describe_kind(kind: Kind) -> str:
    """A kind in words: "int", "float32 array of 2 dims"."""
    if isinstance(kind, tuple):
        return f"{kind[0].name} array of {kind[1]} dims"
    return "a dict" if kind is dict else kind.__name__


class RecordSchema:
    """The keys and value kinds of a reference record (a dict), or its type (bytes)."""

    def __init__(self, kinds: dict[str, Kind] | type, origin: str):
        self.kinds, self.origin = kinds, origin

    @classmethod
    def of(cls, record: Any, origin: str) -> RecordSchema:
        if isinstance(record, dict):
            return cls({k: value_kind(v) for k, v in record.items()}, origin)
        return cls(type(record), origin)

    def mismatch(self, record: Any) -> str | None:
        """None if `record` has the reference's keys and value kinds, else what differs.
        (Run on every record: the common case, the same kinds, is kept to a few checks.)"""
        kinds = self.kinds
        if not isinstance(kinds, dict) or type(record) is not dict:
            return self._other_type(record)
        if record.keys() != kinds.keys():
            return (
                f"the record has keys {sorted(record)}, but the first record ({self.origin}) "
                f"has {sorted(kinds)}"
            )
        for key, value in record.items():
            want, cls = kinds[key], type(value)
            if cls is want:
                continue
            if cls is np.ndarray and type(want) is tuple:
                if value.ndim == want[1] and (value.dtype is want[0] or value.dtype == want[0]):
                    continue
            elif value_kind(value) == want:
                continue
            return (
                f"key {key!r} is {describe_kind(value_kind(value))} {_short(value)}, but it is "
                f"{describe_kind(want)} in the first record ({self.origin})"
            )
        return None

    def _other_type(self, record: Any) -> str | None:
        got = dict if isinstance(record, dict) else type(record)
        want = dict if isinstance(self.kinds, dict) else self.kinds
        if got is want:
            return None
        return (
            f"the record is {describe_kind(got)}, but the first record ({self.origin}) is "
            f"{describe_kind(want)}"
        )


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
