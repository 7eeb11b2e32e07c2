"""What the order of W4's per-record work costs: stage by stage over a chunk of 64 (as
tpufeed's record stages run, then stack), record by record (then stack), and record by record
stacking each result into the batch at once (while it is still in the cache).

    python -m benchmarks.w4_order --image-set imagenet --rounds 3

The same work in one process, no tpufeed machinery: the JPEG bytes of 64 records, then
RandomResizedCrop(224) (OpenCV backend), RandomFlip, Normalize, and a stack into a
preallocated float32 batch. CPU ms per image (time.process_time), medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.shards import ShardReader  # noqa: E402
from benchmarks.vision import BATCH, MEAN, SIZE, STD, prepare  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image-set", default="imagenet")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    from tpufeed import codec
    from tpufeed.transforms import Normalize, RandomFlip, RandomResizedCrop
    from tpufeed.transforms.region import opencv

    opencv().setNumThreads(1)
    files = prepare(os.path.join(ROOT, "benchmarks", "data"), args.images, args.image_set)
    reader = ShardReader(files["array_record"], files["counts"])
    records = [codec.decode(r) for r in reader.read(range(len(reader)))]
    reader.close()
    stages = [
        (RandomResizedCrop(SIZE, backend="opencv"), True),
        (RandomFlip(), True),
        (Normalize(tuple(MEAN), tuple(STD)), False),
    ]
    out = np.empty((BATCH, SIZE, SIZE, 3), np.float32)
    rng = np.random.default_rng(0)

    def apply(element: dict, stage: object, random: bool) -> dict:
        return stage(element, rng) if random else stage(element)  # type: ignore[operator]

    def by_stage(chunk: list[dict]) -> None:
        for stage, random in stages:
            chunk = [apply(e, stage, random) for e in chunk]
        np.stack([e["image"] for e in chunk], out=out[: len(chunk)])

    def by_record(chunk: list[dict]) -> None:
        for i, element in enumerate(chunk):
            for stage, random in stages:
                element = apply(element, stage, random)
            out[i] = element["image"]

    def by_record_stack_after(chunk: list[dict]) -> None:
        done = []
        for element in chunk:
            for stage, random in stages:
                element = apply(element, stage, random)
            done.append(element["image"])
        np.stack(done, out=out[: len(chunk)])

    variants = {
        "stage by stage": by_stage,
        "record by record, stacked after": by_record_stack_after,
        "record by record, each stacked at once": by_record,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            started = time.process_time()
            for at in range(0, len(records) - BATCH + 1, BATCH):
                fn(records[at : at + BATCH])
            n = (len(records) // BATCH) * BATCH
            times[name].append(1000 * (time.process_time() - started) / n)
    print(f"W4 {args.image_set}, {args.images} images, chunks of {BATCH}: CPU ms per image")
    for name, values in times.items():
        print(
            f"  {name:<40} {statistics.median(values):.3f}  ({', '.join(f'{v:.3f}' for v in values)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
