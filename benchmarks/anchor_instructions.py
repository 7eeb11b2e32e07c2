"""Instructions a batch of tpufeed, the bare loop and the careful torch DataLoader, each run
under callgrind on the same gauge data: what a framework adds to the reader, without drift.

    python -m benchmarks.anchor_instructions --workload W1
    python -m benchmarks.anchor_instructions --workload W2 --systems torch,tpufeed

Rows are `compare.py`'s (`benchmarks/systems/`), with 0 workers, over the shards
`instructions.py` counts its gauges on. Each row runs in its own process under valgrind's
callgrind, which dumps its counts at two `os.getloadavg()` marks around the measured batches
(start-up, imports and warm-up left out). Printed per row: all instructions a batch, the
array_record reader's share (everything under its Python binding), and the rest: the work
around the reader, which is what the systems differ in. A timing ratio follows the
instruction ratio only roughly (caches, branches), but these figures do not drift.

Needs valgrind (Debian's `valgrind` package).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SYSTEMS = ("torch", "bare-loop", "tpufeed")
WARM, MEASURED = 8, 64
READER = "array_record_module.so"  # the binding's dispatcher: every read, inclusive


def batches(system: str, workload: str, data_dir: str) -> object:
    """Row `system`'s batches of `workload` with 0 workers over the gauge data."""
    from benchmarks.datafiles import prepare
    from benchmarks.instructions import RECORDS
    from benchmarks.systems import RowSpec
    from benchmarks.workloads import WORKLOADS

    data = prepare(WORKLOADS[workload], RECORDS[workload], data_dir, 0)
    spec = RowSpec(system, workload, 0, 3, 0, data)
    if system == "torch":
        from benchmarks.systems import torch_system

        return torch_system.batches(spec)
    if system == "bare-loop":
        from benchmarks.systems import limits

        return limits.bare_loop(spec)
    from benchmarks.systems import tpufeed_system

    return tpufeed_system.batches(spec)


def child(system: str, workload: str, data_dir: str) -> None:
    it = batches(system, workload, data_dir)
    for _ in range(WARM):
        next(it)  # type: ignore[call-overload]
    os.getloadavg()  # callgrind dumps here: the counted part begins
    for _ in range(MEASURED):
        next(it)  # type: ignore[call-overload]
    os.getloadavg()  # and ends here


def count(system: str, workload: str, data_dir: str) -> tuple[float, float]:
    """(all instructions, the reader's) a batch of `system`, from one callgrind run."""
    python = os.path.realpath(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TPUFEED")}
    env.update(PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="tpufeed-anchors-") as tmp:
        out = os.path.join(tmp, "callgrind.%p")
        script = [python, os.path.abspath(__file__), "--child", system, workload, data_dir]
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-before=getloadavg",
             f"--callgrind-out-file={out}", *script],
            cwd=ROOT, env=env, capture_output=True, text=True,
        )  # fmt: skip
        parts = [f for f in os.listdir(tmp) if f.endswith(".2")]
        if proc.returncode != 0 or len(parts) != 1:
            raise SystemExit(
                f"{system} failed under callgrind:\n{(proc.stdout + proc.stderr)[-3000:]}"
            )
        dump = os.path.join(tmp, parts[0])
        with open(dump) as f:
            total = int(re.search(r"^summary: (\d+)$", f.read(), re.MULTILINE).group(1))  # type: ignore[union-attr]
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    reader = max(
        (int(line.split()[0].replace(",", "")) for line in annotated.splitlines()
         if READER in line and "dispatcher" in line),
        default=0,
    )  # fmt: skip
    return total / MEASURED, reader / MEASURED


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=("W1", "W2"), default="W1")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    rows = {s: count(s, args.workload, args.data_dir) for s in systems}
    least = min(total for total, _ in rows.values())
    print(f"{args.workload}, 0 workers, instructions a batch ({MEASURED} batches after {WARM})")
    print(f"{'system':<10} {'all':>12} {'reader':>12} {'the rest':>12} {'all / least':>12}")
    for system, (total, reader) in rows.items():
        print(
            f"{system:<10} {total:>12,.0f} {reader:>12,.0f} {total - reader:>12,.0f} {total / least:>12.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
