"""How full `pack()` will fill its rows, from a histogram of the sequences' lengths.

The build records each sequence field's lengths in fixed buckets
(`tpufeed.sources.built.length_histogram`). `pack_fit` draws lengths that follow the histogram
(evenly spread over each bucket, at most `SAMPLE` of them, in a shuffled order) and runs
pack's own packer (`tpufeed.ops.first_fit`, `tpufeed.ops.best_fit`) over them, no tokens: a
sequence longer than the row is split into rows' worths, or cut to one with `cut=True`, as
pack does. The fill is the share of the rows' room that holds tokens, over one epoch on one
host (without the empty rows a `batch` after pack adds to fill an epoch's last batch; a
sample smaller than the dataset counts the rows closed in its course, not its end).

It also says when the row length is a poor fit: when most sequences are longer than a row,
or when a row length nearby (half, three quarters, one and a half or twice it) fills far
better.

>>> rows = [(96, 103, 50), (416, 447, 50)]  # 50 sequences of 96-103 tokens, 50 of 416-447
>>> print(pack_fit(rows, 100, 256, 16, "first_fit"))
pack({'tokens': 256}, open_rows=16, method='first_fit'): expected fill 83.0%; a row of 384 would fill 98.8% of its room, against 83.0%
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpufeed.ops.first_fit import Segment
from tpufeed.ops.pack import packer_for

__all__ = ["SAMPLE", "PackFit", "pack_fit"]

SAMPLE = 8192  # lengths drawn: enough for a fill within a few tenths of a percent
_NEARBY = (0.5, 0.75, 1.5, 2.0)  # row lengths tried beside the chosen one
_POOR_FILL = 0.85  # below this, a nearby length is looked for
_FAR_BETTER = 0.05  # ... and named when it fills this much more
_MOSTLY_LONGER = 0.5  # more sequences than this longer than a row: said


@dataclass(frozen=True)
class PackFit:
    """What `pack()` is expected to do with sequences of the recorded lengths.

    `fill`: the share of the rows' room holding tokens; `longer`: the share of sequences
    longer than a row; `dropped`: the share of tokens `cut=True` drops; `better`: (row length,
    its fill) of a nearby length that fills far better, where the fill is poor."""

    key: str
    length: int
    open_rows: int
    method: str
    cut: bool
    fill: float
    longer: float
    dropped: float
    whole_at: int  # a row length that holds 90% of the sequences whole
    better: tuple[int, float] | None = None

    @property
    def advice(self) -> str | None:
        """Why `length` is a poor fit and what fits better; None where it fits."""
        said = []
        if self.longer > _MOSTLY_LONGER:
            fate = (
                f"cut to one row, dropping {self.dropped:.1%} of the tokens"
                if self.cut
                else "split over rows"
            )
            said.append(
                f"{self.longer:.0%} of the {self.key!r} sequences are longer than a row of "
                f"{self.length} ({fate}); {self.whole_at} holds 90% of them whole"
            )
        if self.better is not None:
            said.append(
                f"a row of {self.better[0]} would fill {self.better[1]:.1%} of its room, "
                f"against {self.fill:.1%}"
            )
        return "; ".join(said) or None

    def __str__(self) -> str:
        line = (
            f"pack({{{self.key!r}: {self.length}}}, open_rows={self.open_rows}, "
            f"method={self.method!r}): expected fill {self.fill:.1%}"
        )
        return line if self.advice is None else f"{line}; {self.advice}"


def pack_fit(
    rows: Sequence[tuple[int, int, int]],
    count: int,
    length: int,
    open_rows: int,
    method: str,
    cut: bool = False,
    key: str = "tokens",
) -> PackFit:
    """The fit of rows of `length` to `count` sequences whose lengths have histogram `rows`
    ((lowest, highest, count) per bucket); `open_rows`, `method` and `cut` as in `pack`."""
    lengths = _drawn(rows, min(count, SAMPLE))
    whole = count <= SAMPLE  # the sample is the epoch: its end counts
    fill, dropped = _fill(lengths, length, open_rows, method, cut, whole)
    longer = float(np.mean(lengths > length)) if len(lengths) else 0.0
    better = None
    if fill < _POOR_FILL:
        tried = {}
        for scale in _NEARBY:
            other = max(1, round(length * scale))
            tried[other] = _fill(lengths, other, open_rows, method, cut, whole)[0]
        best = max(tried, key=lambda n: tried[n])
        if tried[best] >= fill + _FAR_BETTER:
            better = best, tried[best]
    whole_at = int(np.quantile(lengths, 0.9, method="higher")) if len(lengths) else length
    return PackFit(key, length, open_rows, method, cut, fill, longer, dropped, whole_at, better)


def _drawn(rows: Sequence[tuple[int, int, int]], n: int) -> np.ndarray:
    """`n` lengths that follow the histogram: the (j + 1/2)/n quantiles, each bucket's spread
    evenly over its lengths, in an order shuffled by a fixed seed."""
    if not n or not rows:
        return np.zeros(0, np.int64)
    counts = np.array([c for _, _, c in rows], np.float64)
    ends = np.cumsum(counts) / counts.sum()
    at = (np.arange(n) + 0.5) / n
    bucket = np.minimum(np.searchsorted(ends, at, side="right"), len(rows) - 1)
    starts = np.concatenate([[0.0], ends[:-1]])
    within = (at - starts[bucket]) / (ends[bucket] - starts[bucket])
    low = np.array([lo for lo, _, _ in rows], np.int64)[bucket]
    width = np.array([hi - lo + 1 for lo, hi, _ in rows], np.int64)[bucket]
    drawn = low + np.minimum((within * width).astype(np.int64), width - 1)
    np.random.default_rng(0).shuffle(drawn)
    return drawn


def _fill(
    lengths: np.ndarray, length: int, open_rows: int, method: str, cut: bool, whole: bool
) -> tuple[float, float]:
    """(fill, share of tokens dropped) of pack's packer over sequences of `lengths`; `whole`:
    the rows still open at the end count (an epoch's end), else only the rows closed."""
    packer = packer_for(method, "pack")([length], open_rows)
    room = np.empty(length, np.int8)  # the packers read lengths only: views of one buffer
    rows = tokens = dropped = 0
    for n in lengths.tolist():
        full, rest = divmod(n, length)
        if cut and n > length:
            dropped += n - length
            full, rest = 1, 0
        # A whole row's worth fills a row of its own, as in the packers: no call needed.
        rows += full
        tokens += full * length
        if rest or not n:
            closed = packer.add(Segment((room[:rest],), None))
            rows += len(closed)
            tokens += sum(len(s.arrays[0]) for row in closed for s in row.segments)
    if whole:
        last = packer.close_all()
        rows += len(last)
        tokens += sum(len(s.arrays[0]) for row in last for s in row.segments)
    total = sum(lengths.tolist())  # Python ints: no overflow whatever the lengths
    return (tokens / (rows * length) if rows else 0.0), (dropped / total if total else 0.0)
