"""The speed gate: instructions a batch of every gauge against the committed baseline.

    python -m benchmarks.gate                   # this checkout against benchmarks/baseline.json
    python -m benchmarks.gate --update          # write this checkout's counts as the baseline
    python -m benchmarks.gate --tree /tmp/754d4ae --baseline /tmp/parent.json

Counts every gauge of `benchmarks/gauges.py` under callgrind (`benchmarks/instructions.py`) and
compares each with the baseline: one that rises more than 3% fails, naming the gauge and both
figures. A fall passes, and is said, but is not written anywhere: a baseline changes only when
someone commits a new one on purpose (CONTRIBUTING.md says when). The counts hold on one
interpreter and set of libraries (constraints/ci.txt); where these differ from the baseline's,
the gate fails and says which, rather than compare figures that cannot be compared.
`tests/repository/test_gate.py` runs it in CI (marked slow: ~3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.gauges import GAUGES  # noqa: E402
from benchmarks.instructions import DATA, count_all, environment  # noqa: E402

BASELINE = os.path.join(ROOT, "benchmarks", "baseline.json")
RISE = 0.03  # the most a gauge may cost over its baseline


def verdict(
    counts: dict[str, float], env: dict[str, str], baseline: dict
) -> tuple[bool, list[str]]:
    """(passed, the report's lines): every gauge's count, taken in `env`, against the
    baseline's."""
    lines, passed = [], True
    differ = [
        f"{key}: {baseline['environment'].get(key, 'absent')} in the baseline, {value} here"
        for key, value in env.items()
        if baseline["environment"].get(key) != value
    ]
    if differ:
        lines.append(
            "the baseline was counted on another interpreter or set of libraries, so its "
            "figures cannot be compared: " + "; ".join(differ) + ". Count on the tested set "
            "(constraints/ci.txt), or refresh the baseline with it (CONTRIBUTING.md)"
        )
        return False, lines
    known = baseline["counts"]
    for gauge, got in counts.items():
        if gauge not in known:
            lines.append(f"{gauge}: {got:,.0f} instructions a batch, and no baseline for it")
            passed = False
            continue
        was = known[gauge]
        change = got / was - 1
        line = f"{gauge}: {got:,.0f} instructions a batch, baseline {was:,.0f} ({change:+.1%})"
        if got > was * (1 + RISE):
            line += f": FAILS, more than {RISE:.0%} over ({GAUGES[gauge].summary})"
            passed = False
        elif got < was * (1 - RISE):
            line += ": cheaper; commit the new baseline with the change (--update)"
        lines.append(line)
    return passed, lines


RECOUNTS = 2  # more counts of a worker gauge over its bound; the least is taken


def recounted(counts: dict[str, float], args: argparse.Namespace, known: dict) -> dict:
    """`counts`, where a gauge with workers rose over its bound, counted again up to RECOUNTS
    times, keeping the least. The parent's share with workers depends on how the workers'
    timing falls (on a loaded machine it waits and polls more: up to +9% between runs of the
    same code), and that only ever adds instructions; the code's own cost is the least count.
    A gauge without workers counts the same every time and is never recounted."""
    counts = dict(counts)
    for gauge, got in counts.items():
        for _ in range(RECOUNTS):
            was = known.get(gauge)
            if not GAUGES[gauge].workers or was is None or got <= was * (1 + RISE):
                break
            print(f"{gauge}: {got:,.0f} over its bound with workers: counted again", flush=True)
            got = min(got, count_all(args.tree, [gauge], args.data_dir, 1)[gauge])
        counts[gauge] = got
    return counts


def _known(path: str) -> dict:
    try:
        with open(path) as f:
            return dict(json.load(f)["counts"])
    except (OSError, ValueError, KeyError):
        return {}  # the verdict names what is wrong with the baseline


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", default=ROOT, help="the checkout counted (default: this one)")
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--update", action="store_true", help="write the counts as the baseline")
    p.add_argument("--data-dir", default=DATA)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    env = environment()  # fails at once, saying so, where valgrind is missing
    counts = count_all(args.tree, list(GAUGES), args.data_dir, args.jobs)
    if not args.update:
        counts = recounted(counts, args, _known(args.baseline))
    if args.update:
        with open(args.baseline, "w") as f:
            json.dump({"environment": env, "counts": counts}, f, indent=1, sort_keys=True)
            f.write("\n")
        for gauge, got in counts.items():
            print(f"{gauge}: {got:,.0f} instructions a batch", flush=True)
        print(f"baseline written: {args.baseline}")
        return 0
    with open(args.baseline) as f:
        baseline = json.load(f)
    passed, lines = verdict(counts, env, baseline)
    print("\n".join(lines), flush=True)
    print("gate: passed" if passed else "gate: FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
