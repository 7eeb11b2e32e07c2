"""One format's seeded parser fuzz, run in a process of its own by
tests/faults/test_parsers_fuzz.py, which bounds each case in time (a hang is a failure) and
sees a native abort as one.

    python -m tests.faults.parser_cases FORMAT SEED COUNT WORKDIR

Cases: first a cut of the pristine file at each header boundary (all of them, or an even
sample when they are more than half of COUNT), then byte flips (1 to 3 bytes, XOR a random
non-zero byte) inside its headers and framing (`parser_layouts`). Each case is read back with
tpufeed and prints one JSON line:

    {"case": 7, "what": "cut at byte 40", "outcome": "right" | "named" | "refused"
     | "different" | "wrong" | "unnamed" | "escaped", "detail": "...", "removed": 0,
     "max_rss_kib": 123456}

"right": the records written (or, for a cut of a format without a count, a prefix of them);
"different": other values read from a format that holds no checksum (JSONL, CSV, a JPEG
header), where no reader can tell a flipped byte from data;
"named": a `tpufeed` error naming the damaged file; "refused": for the JPEG header walk, the
`ValueError` a transform raises for an undecodable image (the pipeline names the record);
anything else fails the test. "removed": warnings that a damaged derived file was removed
(and made again). A line `{"case": N, "what": ...}` opens each case, so the parent
knows which case hung or crashed.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from tests.faults.parser_layouts import LAYOUTS, Layout


def plan(layout: Layout, seed: int, count: int) -> Iterator[tuple[str, bytes, bool]]:
    """(what, damaged bytes, whether it is a cut) for each of `count` cases."""
    data = layout.data
    cuts = layout.cuts
    if len(cuts) > count // 2:
        picked = np.linspace(0, len(cuts) - 1, count // 2).round().astype(int)
        cuts = [cuts[i] for i in sorted(set(picked.tolist()))]
    for cut in cuts:
        yield f"cut at byte {cut} of {len(data)}", data[:cut], True
    regions = [(a, min(b, len(data))) for a, b in layout.regions if a < min(b, len(data))]
    for i in range(count - len(cuts)):
        rng = np.random.default_rng([seed, i])
        damaged = bytearray(data)
        flips = []
        for _ in range(int(rng.integers(1, 4))):
            start, end = regions[int(rng.integers(len(regions)))]
            at, mask = int(rng.integers(start, end)), int(rng.integers(1, 256))
            damaged[at] ^= mask
            flips.append(f"{at}^{mask:#04x}")
        yield f"flip bytes {', '.join(flips)} of {len(data)}", bytes(damaged), False


def run_case(layout: Layout, folder: str, damaged: bytes, cut: bool) -> tuple[str, str, int]:
    """(outcome, detail, warnings that a derived file was removed) of reading `damaged` in
    place of the layout's file, in `folder`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome, detail = _read_case(layout, folder, damaged, cut)
    removed = sum("removed; it is made again" in str(w.message) for w in caught)
    return outcome, detail, removed


def _read_case(layout: Layout, folder: str, damaged: bytes, cut: bool) -> tuple[str, str]:
    from tpufeed.errors import TpufeedError

    os.makedirs(folder)
    if layout.prepare is not None:
        layout.prepare(folder)
    else:
        for name, data in layout.extra.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
    target = layout.target(folder) if layout.target else os.path.join(folder, layout.name)
    if os.path.exists(target):
        os.remove(target)
    with open(target, "wb") as f:
        f.write(damaged)
    try:
        records = layout.read(folder)
    except TpufeedError as error:
        named = folder in str(error) or folder in str(getattr(error, "path", "") or "")
        kind = "named" if named else "unnamed"
        return kind, f"{type(error).__name__}: {str(error)[:300]}"
    except ValueError as error:
        if layout.name.endswith(".jpg"):
            return "refused", f"ValueError: {str(error)[:300]}"
        return "escaped", f"{type(error).__name__}: {str(error)[:300]}"
    except Exception as error:  # noqa: BLE001 - what the fuzz looks for
        return "escaped", f"{type(error).__name__}: {str(error)[:300]}"
    return _compare(layout, records, cut)


def _compare(layout: Layout, records: list[Any], cut: bool) -> tuple[str, str]:
    expected = layout.records
    if _same(records, expected):
        return "right", f"{len(records)} records"
    if cut and layout.prefix_ok and _same(records, expected[: len(records)]):
        return "right", f"a prefix of {len(records)} records (a cut at a record boundary)"
    differ = next(
        (i for i, (a, b) in enumerate(zip(records, expected)) if not _same([a], [b])),
        min(len(records), len(expected)),
    )
    detail = f"{len(records)} records, expected {len(expected)}; first difference at {differ}"
    return ("wrong" if layout.checksummed else "different"), detail


def _same(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def peak_rss_kib() -> int:
    """This process's peak resident memory since it started (VmHWM). Not `ru_maxrss`: Linux
    carries that over fork and exec, so a child of a large pytest process (1.5 GiB late in the
    suite) starts at its parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str]) -> None:
    fmt, seed, count, workdir = argv[0], int(argv[1]), int(argv[2]), argv[3]
    layout = LAYOUTS[fmt]()
    for i, (what, damaged, cut) in enumerate(plan(layout, seed, count)):
        print(json.dumps({"case": i, "what": what}), flush=True)
        folder = os.path.join(workdir, f"case-{i}")
        outcome, detail, removed = run_case(layout, folder, damaged, cut)
        rss = peak_rss_kib()
        line = {"case": i, "what": what, "outcome": outcome, "detail": detail}
        line.update(removed=removed, max_rss_kib=rss)
        print(json.dumps(line), flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
