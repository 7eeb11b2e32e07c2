"""Two versions of `tpufeed/codec.py` decoding the same records, in turns, in one process.

    git show <old commit>:tpufeed/codec.py > /tmp/codec_before.py
    python -m benchmarks.decode_ab /tmp/codec_before.py tpufeed/codec.py

Each round times `decode` on every kind of record below with both files, the order flipped
every round, and keeps the ratio before/after of the round: a machine that drifts between
rounds moves both alike. Prints the median ratio per kind (above 1: the second file decodes
faster) and the median microseconds of each side.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from types import ModuleType

import numpy as np


def load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDS = {
    "arrays and ints": {"x": np.arange(16, dtype=np.int32), "y": np.ones(3), "label": 7, "id": 9},
    "an image": {"image": np.zeros((224, 224, 3), np.uint8), "label": 3},
    "text and numbers": {"text": "a sentence of text", "raw": b"\x00" * 40, "p": 0.5, "ok": True},
    "bool masks": {"mask": np.ones(128, bool), "seen": np.zeros((64, 64), bool), "label": 1},
}


def per_call_us(decode: object, data: bytes, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        decode(data)  # type: ignore[operator]
    return (time.perf_counter() - started) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before", help="a codec.py")
    p.add_argument("after", help="another codec.py")
    p.add_argument("--rounds", type=int, default=101)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    before, after = load(args.before, "codec_before"), load(args.after, "codec_after")
    print("| record | before µs | after µs | before / after |")
    print("|---|---|---|---|")
    for kind, record in RECORDS.items():
        data = after.encode(record)
        if before.decode(data).keys() != after.decode(data).keys():
            raise SystemExit(f"the two files decode {kind} differently")
        times: dict[str, list[float]] = {"before": [], "after": []}
        ratios = []
        for r in range(args.rounds):
            order = [("before", before), ("after", after)]
            for side, module in order if r % 2 else order[::-1]:
                times[side].append(per_call_us(module.decode, data, args.calls))
            ratios.append(times["before"][-1] / times["after"][-1])
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"| {kind} | {b:.2f} | {a:.2f} | {statistics.median(ratios):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
