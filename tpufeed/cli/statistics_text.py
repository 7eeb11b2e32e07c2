"""`tpufeed inspect`'s lines for a dataset's build statistics (`Dataset.statistics`, as the
`tpufeed.inspect/1` document's "statistics" holds them).

Record sizes and each field's lengths are shown by their quantiles and a histogram whose
buckets are the recorded ones joined into powers of two (1, 2-3, 4-7, ...), each with its
records and a bar; each field's count, types and shape; each input file's records.

>>> print("\\n".join(statistics_lines({"recorded": False, "why": "built by tpufeed 0.2"})))
statistics: not recorded (built by tpufeed 0.2)
"""

from __future__ import annotations

import json
from typing import Any

from tpufeed.errors import plural

__all__ = ["statistics_lines"]

_BAR = 30  # characters of the longest bar


def statistics_lines(statistics: dict[str, Any]) -> list[str]:
    """The lines for `statistics` (`DatasetStatistics.to_json()`)."""
    if not statistics["recorded"]:
        return [f"statistics: not recorded ({statistics['why']})"]
    lines = ["statistics (counted by the build):"]
    lines += _lengths_lines("record bytes", statistics["record_bytes"])
    for name, field in statistics["fields"].items():
        shape = "" if field["shape"] is None else f", shape {json.dumps(field['shape'])}"
        ndims = field["ndims"]
        varying = f", {'/'.join(map(str, ndims))} dimensions" if len(ndims) > 1 else ""
        lines.append(
            f"  field {name}: in {plural(field['count'], 'record')}, "
            f"{' | '.join(field['types'])}{shape}{varying}"
        )
        if isinstance(field["lengths"], dict):
            lines += _lengths_lines("  lengths", field["lengths"])
    inputs = statistics["inputs"]
    if isinstance(inputs, list):
        lines += [
            f"  input {i['path']}: {plural(i['read'], 'record')} read, "
            f"{plural(i['records'], 'record')} in the dataset"
            for i in inputs
        ]
    else:
        lines.append(f"  inputs: {inputs} (records written by WriteShards, not read from files)")
    return lines


def _lengths_lines(what: str, lengths: dict[str, Any]) -> list[str]:
    """A histogram's summary line and its rows joined into powers of two, with bars."""
    if not lengths["count"]:
        return [f"  {what}: none"]
    rows, high = lengths["histogram"], lengths["max"]
    lines = [
        f"  {what}: {lengths['min']:,} to {high:,}, mean {lengths['mean']:,.1f}, "
        f"median {_quantile(rows, 0.5, high):,}, 90% {_quantile(rows, 0.9, high):,}, "
        f"99% {_quantile(rows, 0.99, high):,} (at most: the top of its bucket)"
    ]
    joined: dict[int, int] = {}
    for low, _, n in rows:
        power = low.bit_length()
        joined[power] = joined.get(power, 0) + n
    most = max(joined.values())
    spans = {p: _span(p) for p in joined}
    wide, counts = max(map(len, spans.values())), max(len(f"{n:,}") for n in joined.values())
    indent = " " * (4 + len(what) - len(what.lstrip()))  # two past the summary line
    for power, n in sorted(joined.items()):
        bar = "#" * max(1, round(_BAR * n / most))
        lines.append(f"{indent}{spans[power]:>{wide}} {n:>{counts},} {bar}")
    return lines


def _span(power: int) -> str:
    """The lengths of bit length `power`: "0", "1", "2-3", "4-7", ..."""
    if power < 2:
        return str(power)
    return f"{1 << (power - 1):,}-{(1 << power) - 1:,}"


def _quantile(rows: list[list[int]], share: float, most: int) -> int:
    """The highest length of the bucket where `share` of the lengths is reached (at most
    `most`, the greatest length)."""
    total = sum(n for _, _, n in rows)
    seen = 0
    for _, high, n in rows:
        seen += n
        if seen >= share * total:
            return min(high, most)
    return most
