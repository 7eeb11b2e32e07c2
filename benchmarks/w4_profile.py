"""Where W4's time goes in tpufeed: py-spy samples of the vision rows, by step.

    python -m benchmarks.w4_profile --image-set imagenet --workers 0 [--images 1000] [--json F]

One fresh process runs `benchmarks.vision --row tpufeed` (1 warm-up + `--passes` epochs)
under `py-spy record --subprocesses --nonblocking` (50 Hz; the sampled processes are never
paused; idle threads are not sampled: the samples are of threads on a core or ready to run).
Each sample goes to one step by the frames on its stack, checked in the order
below; "tpufeed per-record Python" is what is left inside tpufeed's package (the stage calls,
the element dicts, the chunk and batch bookkeeping), "other" the rest (the benchmark's loop,
the interpreter). Printed: CPU ms per image by step (all processes) and the share of the busy
samples (those not waiting).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.profiling import _WAIT  # noqa: E402

RATE_HZ = 50
# (step, frame substrings that put a sample in it), checked in this order on the whole stack.
STEPS = [
    ("JPEG decode (cv2.imdecode)", ("_decode_opencv (",)),
    ("JPEG decode (TurboJPEG window)", ("decode_window (",)),
    ("JPEG decode (Pillow draft)", ("_region_pillow (",)),
    ("resample the box", ("resize_region (",)),
    ("JPEG header, box, RGB swap", ("decode_region (", "image_size (", "sample_crop_box (")),
    ("flip", ("RandomFlip.__call__ (",)),
    ("normalise", ("Normalize.__call__ (", "Normalize.into (")),
    ("record codec decode", ("decode (tpufeed/codec", "codec.py")),
    ("per-record rng", ("for_record (", "record_rng (", "RecordRngs")),
    ("read shards", ("array_record", "read (tpufeed/run/chunks.py", "SourceView")),
    ("stack / write slot", ("write_stacked", "stacking.py", "write_batch")),
    ("hand-off to consumer", ("read_batch", "iterator.py", "stream.py")),
    ("tpufeed per-record Python", ("tpufeed/",)),
]


def classify(stack: str) -> str:
    frames = stack.split(";")
    if any(key in frames[-1] for key in _WAIT):
        return "wait"
    for step, keys in STEPS:
        if any(key in frame for frame in frames for key in keys):
            return step
    return "other"


def summarise(raw_path: str, images: int) -> dict[str, Any]:
    counts: collections.Counter = collections.Counter()
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack:
                counts[classify(stack)] += int(count)
    busy = sum(n for step, n in counts.items() if step != "wait") or 1
    return {
        "cpu_ms_per_image": {s: 1000 * n / RATE_HZ / images for s, n in counts.items()},
        "share_of_busy": {s: n / busy for s, n in counts.items() if s != "wait"},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image-set", default="imagenet")
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--row", default="tpufeed", help="a tpufeed row of benchmarks.vision")
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--raw", default=None, help="also keep py-spy's collapsed stacks here")
    args = p.parse_args(argv)
    if shutil.which("py-spy") is None:
        p.error('py-spy is not installed; it is in the dev extra: pip install -e ".[dev]"')
    row = args.row if args.workers == 0 else args.row + "-workers"
    with tempfile.TemporaryDirectory(prefix="tpufeed-w4-profile-") as tmp:
        raw, result = os.path.join(tmp, "raw.txt"), os.path.join(tmp, "row.json")
        common = ["--images", str(args.images), "--image-set", args.image_set]
        from benchmarks.vision import prepare

        prepare(  # the data, written once and not profiled
            os.path.join(ROOT, "benchmarks", "data"), args.images, args.image_set
        )
        cmd = ["py-spy", "record", "--subprocesses", "--nonblocking"]
        cmd += ["--rate", str(RATE_HZ), "--format", "raw", "-o", raw, "--", sys.executable]
        cmd += ["-m", "benchmarks.vision", "--row", row, "--passes", str(args.passes)]
        cmd += ["--workers", str(max(1, args.workers)), "--json", result] + common
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
            return 1
        with open(result) as f:
            run = json.load(f)
        summary = summarise(raw, args.images * (args.passes + 1))
        if args.raw:
            shutil.copy(raw, args.raw)
    steps = [s for s, _ in STEPS] + ["other", "wait"]
    print(
        f"W4 {args.image_set}, {row} (N = {args.workers}), {args.images} images x "
        f"{args.passes + 1} epochs; measured {run['cpu_s_per_image'] * 1000:.2f} CPU ms/image\n"
        "| step | CPU ms / image | share of busy samples |\n|---|---|---|"
    )
    for step in steps:
        ms = summary["cpu_ms_per_image"].get(step, 0.0)
        share = summary["share_of_busy"].get(step)
        print(f"| {step} | {ms:.3f} | {'' if share is None else f'{share:.0%}'} |")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"args": vars(args), "row": run, **summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
