"""Instructions a batch, counted by callgrind: exact where timings on these machines drift ±30%.

    python -m benchmarks.instructions                          # every gauge, this checkout
    python -m benchmarks.instructions --reference /tmp/before  # and another checkout, side by side
    python -m benchmarks.instructions --gauges W1-0w,W1-2w --tree /tmp/other

Each gauge (`benchmarks/gauges.py`: W1, W2 and a W4-like image pipeline on the imagenet set
with 0 workers and with 2, the parent's share; a W3-like packing pipeline) runs in a process of its
own under valgrind's callgrind, over small data sets made once under `--data-dir` with fixed
seeds. callgrind dumps its counts at two marks around the measured batches, so a gauge's figure
is the instructions of those batches over their number: start-up, imports and warm-up left
out, and no second run. Two runs of the same code on the same interpreter and libraries give
the same count (the parent's share with workers within ~1%), however busy the machine.
`benchmarks/gate.py` holds these counts against a committed baseline in CI.

Needs valgrind (Debian's `valgrind` package).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.gauges import GAUGES  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data")
# The records each gauge's data set holds: enough that no gauge's batches run into a second
# epoch (an epoch's end is work of its own).
RECORDS = {"W1": 24_576, "W2": 12_288, "W4": 1536}
# What the counts depend on besides the code: the interpreter, and the libraries the gauges'
# batches run through (a baseline taken with others cannot be compared).
DISTRIBUTIONS = (
    "numpy",
    "array-record",
    "cloudpickle",
    "opencv-python-headless",
    "simplejpeg",
    "turbojpeg",
    "pillow",
)


def environment() -> dict[str, str]:
    """The interpreter, valgrind and the versions of `DISTRIBUTIONS` counts are taken with."""
    found = {
        "python": f"{sys.implementation.name} {sys.version.split()[0]}",
        "machine": os.uname().machine,
        "valgrind": valgrind_version(),
    }
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def valgrind_version() -> str:
    """valgrind's version; raises, saying how to install it, where it is missing."""
    if shutil.which("valgrind") is None:
        raise SystemExit(
            "valgrind is not installed, and the instruction counts need it: "
            "apt-get install valgrind (Debian's package; every CI machine kind has it)"
        )
    done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def prepare(data_dir: str) -> dict[str, list[str]]:
    """Every gauge's shards under `data_dir` (made once, with fixed seeds): workload -> paths."""
    from benchmarks import lm, vision
    from benchmarks.datafiles import prepare as prepare_workload
    from benchmarks.workloads import WORKLOADS

    os.makedirs(data_dir, exist_ok=True)
    return {
        "W1": list(prepare_workload(WORKLOADS["W1"], RECORDS["W1"], data_dir, 0).array_record),
        "W2": list(prepare_workload(WORKLOADS["W2"], RECORDS["W2"], data_dir, 0).array_record),
        "W3": list(lm.prepare(data_dir)["array_record"]),
        "W4": list(vision.prepare(data_dir, RECORDS["W4"], "imagenet")["array_record"]),
    }


def count(tree: str, library: str, gauge: str, data_json: str, keep: str | None = None) -> float:
    """Instructions a batch of `gauge` with tpufeed from checkout `tree` (through `library`,
    `benchmarks/trees.py`) in a callgrind run; with `keep`, its dump of the measured batches is
    copied there (`callgrind_annotate` it)."""
    python = os.path.realpath(sys.executable)  # a shim (pyenv) would be what callgrind counts
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TPUFEED")}
    env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
    env["OPENBLAS_NUM_THREADS"] = "1"  # no BLAS threads spinning as numpy loads
    with tempfile.TemporaryDirectory(prefix="tpufeed-callgrind-") as tmp:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--dump-before=getloadavg",
            f"--callgrind-out-file={tmp}/callgrind.%p",
            python,
            os.path.join(ROOT, "benchmarks", "gauges.py"),
            tree,
            library,
            gauge,
            data_json,
        ]
        proc = subprocess.Popen(
            cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out, err = proc.communicate()
        part = os.path.join(tmp, f"callgrind.{proc.pid}.2")
        if proc.returncode != 0 or not os.path.exists(part):
            raise SystemExit(
                f"{gauge} failed under callgrind in {tree} (exit {proc.returncode}):\n"
                f"{(out + err)[-3000:]}"
            )
        extra = os.path.join(tmp, f"callgrind.{proc.pid}.3")
        if os.path.exists(extra):  # a third mark: something else called getloadavg
            raise SystemExit(f"{gauge}: getloadavg was called more than twice; counts unusable")
        with open(part) as f:
            found = re.search(r"^summary: (\d+)$", f.read(), re.MULTILINE)
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(part, os.path.join(keep, f"{gauge}.callgrind"))
    if found is None:
        raise SystemExit(f"{gauge}: no summary line in callgrind's dump {part}")
    return int(found.group(1)) / GAUGES[gauge].batches


def count_all(
    tree: str, gauges: list[str], data_dir: str, jobs: int, keep: str | None = None
) -> dict[str, float]:
    """`count` of every gauge, `jobs` at a time; the data made first."""
    from benchmarks.bytecode import compile_sources
    from benchmarks.trees import library

    tree = os.path.abspath(tree)
    compile_sources(tree)  # each run imports from bytecode, as an installed package does
    compile_sources(ROOT)
    data = prepare(data_dir)
    # At a fixed path: a path is a string the gauge hashes and keeps, so its length and
    # letters are part of what is counted.
    data_json = os.path.join(os.path.abspath(data_dir), "gauges.json")
    with open(data_json, "w") as f:
        json.dump(data, f)
    # The tree's library at a path of its own that does not change from run to run (a path is
    # a string the gauges keep, like the one above).
    name = hashlib.sha1(os.path.realpath(tree).encode()).hexdigest()[:12]
    folder = os.path.join(os.path.abspath(data_dir), "libraries", name)
    shutil.rmtree(folder, ignore_errors=True)
    library(tree, folder)
    compile_sources(folder)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        counts = list(pool.map(lambda g: count(tree, folder, g, data_json, keep), gauges))
    return dict(zip(gauges, counts))


def parse_gauges(value: str) -> list[str]:
    names = [g for g in value.split(",") if g] if value else list(GAUGES)
    unknown = [g for g in names if g not in GAUGES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown gauges {unknown}; known: {sorted(GAUGES)}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", default=ROOT, help="the checkout counted (default: this one)")
    p.add_argument("--reference", help="another checkout, counted the same way, side by side")
    p.add_argument("--gauges", type=parse_gauges, default=list(GAUGES), help="comma-separated")
    p.add_argument("--data-dir", default=DATA)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", dest="json_path", help="write the counts here")
    p.add_argument(
        "--keep",
        help="copy each gauge's callgrind dump of the measured batches into this folder "
        "(of this checkout's run): callgrind_annotate shows where the instructions go",
    )
    args = p.parse_args(argv)
    valgrind_version()
    trees = {"this": args.tree} | ({"reference": args.reference} if args.reference else {})
    counts = {
        side: count_all(
            tree, args.gauges, args.data_dir, args.jobs, args.keep if side == "this" else None
        )
        for side, tree in trees.items()
    }
    for gauge in args.gauges:
        line = f"{gauge:7} {counts['this'][gauge]:>15,.0f} a batch"
        if args.reference:
            ref = counts["reference"][gauge]
            line += (
                f"   reference {ref:>15,.0f}   this / reference {counts['this'][gauge] / ref:.3f}"
            )
        print(f"{line}   ({GAUGES[gauge].summary})", flush=True)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"trees": trees, "environment": environment(), "counts": counts}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
