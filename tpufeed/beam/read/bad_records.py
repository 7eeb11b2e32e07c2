"""The build's bad records: counted, the first few listed in sorted order, and more than
`--max-bad` of them failing the build before its manifest is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from tpufeed.errors import SourceError

__all__ = ["BadRecords", "CheckBad", "add_pairs", "input_counts", "sum_stats"]

log = logging.getLogger("tpufeed.build")
_EXAMPLES = 20


def sum_stats(stats: Any) -> tuple[int, int]:
    """(records read, records filtered) of every block (of its "stats", or of sums made)."""
    read = filtered = 0
    for r, f, *_ in stats:
        read, filtered = read + r, filtered + f
    return read, filtered


def input_counts(counts: list[tuple[int, tuple[int, int]]], paths: dict[int, str]) -> list[dict]:
    """[{"path", "read", "records"}] of each input file in order, from its blocks' summed
    (records read, records sent): the manifest's statistics.inputs."""
    summed = dict(counts)
    return [
        {"path": paths[index], "read": summed[index][0], "records": summed[index][1]}
        for index in sorted(summed)
    ]


def add_pairs(pairs: Any) -> tuple[int, int]:
    """The element-wise sum of (read, sent) pairs."""
    read = sent = 0
    for r, s in pairs:
        read, sent = read + r, sent + s
    return read, sent


class BadRecords(beam.CombineFn):
    """(count, the first examples in sorted order): the same whatever the bundling."""

    def create_accumulator(self) -> tuple[int, list[str]]:
        return 0, []

    def add_input(self, acc: tuple[int, list[str]], item: str) -> tuple[int, list[str]]:
        return acc[0] + 1, sorted(acc[1] + [item])[:_EXAMPLES]

    def merge_accumulators(self, accs: Any) -> tuple[int, list[str]]:
        count = 0
        examples: list[str] = []
        for n, ex in accs:
            count, examples = count + n, sorted(examples + ex)[:_EXAMPLES]
        return count, examples

    def extract_output(self, acc: tuple[int, list[str]]) -> tuple[int, list[str]]:
        return acc


class CheckBad(beam.DoFn):
    """The build's counts for the manifest; fails the job when skips exceed --max-bad."""

    def __init__(self, max_bad: int):
        self._max_bad = max_bad

    def process(self, _: Any, stats: tuple[int, int], bad: tuple[int, list[str]]) -> Iterator[dict]:
        (read, filtered), (count, examples) = stats, bad
        if count > self._max_bad:
            listed = "\n  ".join(examples)
            raise SourceError(
                f"{count} bad records, more than --max-bad {self._max_bad}; the "
                f"first {len(examples)}:\n  {listed}"
            )
        for line in examples:
            log.warning("skipped %s", line)
        yield {
            "records_in": read,
            "skipped": count,
            "skipped_examples": examples,
            "filtered": filtered,
        }
