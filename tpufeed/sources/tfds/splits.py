"""TFDS's split strings (`train[:50%]`, `train[10:20]`, `train[:10%]+test`, `all`) as the
records of each shard they select, computed as TFDS computes them, without TFDS.

The grammar and rounding are those of `tensorflow_datasets.core.splits` (4.9): parts joined by
`+`; each part a split name with an optional `[from:to]` in records, in percent (rounded to the
closest record, halves to even, as Python's `round`) or in shards (`[:4shard]`, `[3shard]`);
negative bounds count from the end; `all` is every split in the order the dataset lists them.
Pure arithmetic over the shard lengths that `dataset_info.json` gives.

>>> shard_spans("train[:50%]", {"train": (10, 10)})
[Span(split='train', shard=0, skip=0, take=10)]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from tpufeed.errors import InvalidArgumentError

__all__ = ["Span", "shard_spans", "split_bounds"]

_PART = re.compile(r"^(?P<name>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_BOUND = re.compile(r"^((?P<value>-?[\d_.]+)(?P<unit>%|shard)?)?$")
_PLUS = re.compile(r"\s*\+\s*")
_GUIDE = "see https://www.tensorflow.org/datasets/splits"


class Span(NamedTuple):
    """`take` records of shard `shard` of `split`, after its first `skip`."""

    split: str
    shard: int
    skip: int
    take: int


class _Part(NamedTuple):
    split: str
    start: int | float | None
    stop: int | float | None
    unit: str  # "abs", "%" or "shard"


def shard_spans(spec: str, shard_lengths: Mapping[str, Sequence[int]]) -> list[Span]:
    """The records `spec` selects, shard by shard, in TFDS's order; `shard_lengths` maps each
    split to its shards' record counts, in the order the dataset lists the splits."""
    spans = []
    for split, start, stop in split_bounds(spec, shard_lengths):
        spans += _spans_of(split, start, stop, shard_lengths[split])
    if not spans:
        raise InvalidArgumentError(f"split {spec!r} selects no records")
    return spans


def split_bounds(
    spec: str, shard_lengths: Mapping[str, Sequence[int]]
) -> list[tuple[str, int, int]]:
    """(split, first record, end) of each part of `spec`, in records."""
    if not isinstance(spec, str):
        raise InvalidArgumentError(
            f"split must be a string such as 'train[:50%]', got {type(spec).__name__}: {spec!r}"
        )
    bounds = []
    for text in _PLUS.split(spec.strip()):
        for part in _parts(text, spec, list(shard_lengths)):
            bounds.append(_absolute(part, shard_lengths, spec))
    return bounds


def _parts(text: str, spec: str, splits: list[str]) -> list[_Part]:
    found = _PART.match(text)
    if not found:
        raise InvalidArgumentError(f"split {spec!r}: {text!r} is not a split or slice; {_GUIDE}")
    name, selector = found["name"], found["selector"]
    if name == "all":
        if selector:
            raise InvalidArgumentError(f"split {spec!r}: TFDS does not slice 'all'")
        return [_Part(split, None, None, "abs") for split in splits]
    if selector is None:
        return [_Part(name, None, None, "abs")]
    bounds = [_BOUND.match(b) for b in selector.split(":")]
    if len(bounds) > 2 or not all(bounds) or not any(b and b[0] for b in bounds):
        raise InvalidArgumentError(f"split {spec!r}: {text!r} is not a slice; {_GUIDE}")
    if len(bounds) == 1:  # train[3shard]: one shard
        (only,) = bounds
        if only is None or only["unit"] != "shard":
            raise InvalidArgumentError(
                f"split {spec!r}: {text!r}: records and percents are sliced as [from:to]"
            )
        return [_Part(name, int(only["value"]), int(only["value"]) + 1, "shard")]
    low, high = bounds
    assert low is not None and high is not None  # matched above
    unit = low["unit"] or high["unit"] or "abs"
    return [
        _Part(name, _number(low["value"], unit, spec), _number(high["value"], unit, spec), unit)
    ]


def _number(text: str | None, unit: str, spec: str) -> int | float | None:
    if text is None:
        return None
    try:
        value: int | float = float(text) if unit == "%" else int(text)
    except ValueError:
        raise InvalidArgumentError(f"split {spec!r}: {text!r} is not a number") from None
    if unit == "%" and abs(value) > 100:
        raise InvalidArgumentError(f"split {spec!r}: percents lie in [-100, 100], got {text}%")
    return value


def _absolute(
    part: _Part, shard_lengths: Mapping[str, Sequence[int]], spec: str
) -> tuple[str, int, int]:
    if part.split not in shard_lengths:
        raise InvalidArgumentError(
            f"split {spec!r}: the dataset has no split {part.split!r}; it has {list(shard_lengths)}"
        )
    lengths = shard_lengths[part.split]
    total = sum(lengths)
    start, stop = part.start, part.stop
    if part.unit == "%":  # TFDS's 'closest' rounding: round() of a float, halves to even
        start = 0 if start is None else int(round(start * total / 100.0))
        stop = total if stop is None else int(round(stop * total / 100.0))
    elif part.unit == "shard":
        start = 0 if start is None else sum(lengths[: int(start)])
        if stop is not None and stop <= 0:
            stop = len(lengths) + int(stop)
        stop = total if stop is None else sum(lengths[: int(stop)])
    start = 0 if start is None else int(start)
    stop = total if stop is None else int(stop)
    if abs(start) > total or abs(stop) > total:
        raise InvalidArgumentError(
            f"split {spec!r}: [{start}:{stop}] of {part.split!r} lies outside its {total} records"
        )
    start = start + total if start < 0 else start
    stop = stop + total if stop < 0 else stop
    if start > stop:
        raise InvalidArgumentError(
            f"split {spec!r}: {part.split!r} from record {start} to {stop} runs backwards"
        )
    return part.split, start, stop


def _spans_of(split: str, start: int, stop: int, lengths: Sequence[int]) -> list[Span]:
    """TFDS's `get_file_instructions`: the shards that [start, stop) covers; empty shards are
    never read."""
    spans, first = [], 0
    for shard, length in enumerate(lengths):
        end = first + length
        if length and start < end and stop > first:
            skip = max(start - first, 0)
            take = min(stop, end) - first - skip
            if take:
                spans.append(Span(split, shard, skip, take))
        first = end
    return spans
