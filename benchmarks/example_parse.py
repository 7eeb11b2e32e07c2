"""Two versions of `transforms/example.py` parsing the same `tf.train.Example`s, in turns.

    git show 483e9d8:transforms/example.py > /tmp/example_before.py  # the Python parser
    python -m benchmarks.example_parse /tmp/example_before.py transforms/example.py

Since issue 29 `parse_example` is protobuf's own parser (upb) plus the conversion to numpy;
before, it walked the wire format in Python. Each round times both files' `parse_example` on
every kind of record below, the order flipped every round; the table gives the median
records/s of each and the median of the per-round ratios (above 1: the second file is
faster). The two must return the same dicts, checked first.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np


def load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # for its dataclass
    spec.loader.exec_module(module)
    return module


_rng = np.random.default_rng(0)
RECORDS = {
    # W2's record as a tf.Example usually holds it: encoded image bytes, a label, scalars
    "W2-like: image bytes, label, 2 floats, id": {
        "image": _rng.integers(0, 256, 3072, dtype=np.uint8).tobytes(),
        "label": 7,
        "weight": 0.5,
        "score": 0.25,
        "id": b"record-000123",
    },
    # What `tpufeed build --record-format tf_example` writes for a uint8[32, 32, 3] array
    "image as 3072 int64s + shape": {
        "image": _rng.integers(0, 256, 3072, dtype=np.uint8),
        "image/shape": np.array([32, 32, 3]),
        "label": 7,
    },
    "1024 floats, 16 ints": {
        "x": _rng.standard_normal(1024).astype(np.float32),
        "ids": _rng.integers(0, 1 << 40, 16),
    },
}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if sorted(a) != sorted(b):
        return False
    for name, value in a.items():
        other = b[name]
        if isinstance(value, np.ndarray):
            if not isinstance(other, np.ndarray) or value.dtype != other.dtype:
                return False
            if not np.array_equal(value, other):
                return False
        elif value != other:
            return False
    return True


def per_second(parse: Callable[[bytes], Any], data: bytes, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        parse(data)
    return calls / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before", help="an example.py")
    p.add_argument("after", help="another example.py")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    from google.protobuf.internal import api_implementation

    sides = {
        "before": load(args.before, "example_before").parse_example,
        "after": load(args.after, "example_after").parse_example,
    }
    print(f"protobuf implementation: {api_implementation.Type()}; {args.rounds} rounds")
    print("| record | bytes | before rec/s | after rec/s | after / before |")
    print("|---|---|---|---|---|")
    for kind, record in RECORDS.items():
        data = sys.modules["example_after"].encode_example(record)
        if not same(sides["before"](data), sides["after"](data)):
            raise SystemExit(f"the two files parse {kind} differently")
        rates: dict[str, list[float]] = {side: [] for side in sides}
        ratios = []
        for r in range(args.rounds):
            order = list(sides.items())
            for side, parse in order if r % 2 else order[::-1]:
                rates[side].append(per_second(parse, data, args.calls))
            ratios.append(rates["after"][-1] / rates["before"][-1])
        before, after = statistics.median(rates["before"]), statistics.median(rates["after"])
        ratio = statistics.median(ratios)
        print(f"| {kind} | {len(data)} | {before:,.0f} | {after:,.0f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
