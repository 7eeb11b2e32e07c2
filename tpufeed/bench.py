"""`tpufeed bench TARGET`: run a pipeline for a while, find its bottleneck, say what to change.

TARGET is `file.py:make_dataset` (a function returning a Dataset) or a dataset — a folder built
by `tpufeed build`, or ArrayRecord/TFRecord files — with `--transform module:function`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
from typing import Any

from tpufeed.autotune import cpu_count
from tpufeed.dataset import Dataset
from tpufeed.errors import InvalidArgumentError
from tpufeed.stats import PipelineStats


def load_callable(spec: str) -> Any:
    """`module:function` or `path/to/file.py:function`."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise InvalidArgumentError(f"expected module:function or file.py:function, got {spec!r}")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise InvalidArgumentError(f"{spec}: no such file {target}")
        module_spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(target))[0], target)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise InvalidArgumentError(f"{spec}: {target} has no attribute {name!r}") from None


def make_target(args: argparse.Namespace) -> Dataset:
    target = args.target
    if ":" in target and not target.startswith("gs://") and not os.path.exists(target):
        ds = load_callable(target)()
        if not isinstance(ds, Dataset):
            raise InvalidArgumentError(f"{target} returned {type(ds).__name__}, not a tpufeed.Dataset")
        return ds
    from tpufeed.sources.manifest import is_dataset_path

    if is_dataset_path(target):
        ds = Dataset.open(target)
    elif ".tfrecord" in target:
        ds = Dataset.from_tfrecord(target)
    else:
        ds = Dataset.from_array_record(target)
    ds = ds.shuffle(0)
    for spec in args.transform:
        ds = ds.map(load_callable(spec))
    return ds.batch(args.batch_size).repeat()


def run(ds: Dataset, seconds: float, batches: int | None, step_time: float,
        progress: bool = True) -> tuple[PipelineStats, list[tuple[float, int]]]:
    """Iterates for `seconds` (or `batches`), sleeping `step_time` per batch like a training
    step; returns the statistics and (time, records so far) samples for the plot."""
    from tqdm import tqdm

    it = ds.iterator()
    samples: list[tuple[float, int]] = []
    start = time.perf_counter()
    with tqdm(total=batches, disable=not progress, unit="batch", desc="bench", file=sys.stderr) as bar:
        for count, _ in enumerate(it, 1):
            elapsed = time.perf_counter() - start
            samples.append((elapsed, it.records_delivered))
            bar.update(1)
            if step_time:
                time.sleep(step_time)
            if (batches is not None and count >= batches) or (batches is None and elapsed >= seconds):
                break
    stats = it.stats()
    it.close()
    return stats, samples


def verdict(stats: PipelineStats, step_time: float) -> dict[str, Any]:
    """Input-bound or not, by how much, and what to change."""
    batches_per_s = stats.batches / stats.wall_seconds if stats.wall_seconds else 0.0
    input_bound = stats.wait_fraction > 0.05
    bottleneck = stats.bottleneck
    cores = cpu_count()
    worker_side = bottleneck not in (None, "transfer", "read")
    per_batch = stats.records / stats.batches if stats.batches else 0.0
    needed = per_batch / step_time if step_time > 0 else float("inf")  # records/s training takes
    capacity = stats.stages[bottleneck].records_per_s if bottleneck else float("inf")
    if not input_bound:
        advice = "the pipeline keeps up: nothing to change"
    elif capacity >= 1.1 * needed:
        advice = (f"the pipeline could give {capacity:,.0f} records/s and training takes "
                  f"{needed:,.0f}, but they take turns: overlap them with "
                  f".prefetch({max(2, 2 * stats.prefetch)}) (now {stats.prefetch})")
    elif worker_side and stats.workers < cores:
        advice = (f"{bottleneck} limits the pipeline: run it in more processes with "
                  f".workers({cores}) (now {stats.workers})")
    elif worker_side:
        advice = (f"{bottleneck} limits the pipeline and all {cores} cores run it: move it "
                  "offline into `tpufeed build --transform ...`, so training reads its output")
    elif bottleneck == "read":
        advice = ("reading records limits the pipeline: put the shards on local SSD or give "
                  "the shard cache more room (cache_bytes), and read with more workers")
    else:
        advice = "the transfer to the consumer limits the pipeline: use fewer, larger batches"
    slowdown = 1 / (1 - stats.wait_fraction) if stats.wait_fraction < 1 else float("inf")
    return {"input_bound": input_bound, "batches_per_s": batches_per_s,
            "step_time": step_time, "slowdown": slowdown, "bottleneck": bottleneck,
            "suggestion": advice}


def plot(path: str, stats: PipelineStats, samples: list[tuple[float, int]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    step = max(1, len(samples) // 50)  # ~50 points, each a rate over several batches
    points = samples[::step]
    rates = [(r1 - r0) / (t1 - t0) if t1 > t0 else 0.0
             for (t0, r0), (t1, r1) in zip(points, points[1:])]
    left.plot([t for t, _ in points[1:]], rates)
    left.set(title="throughput", xlabel="seconds", ylabel="records/s")
    names = list(stats.stages)
    right.barh(names, [stats.stages[n].seconds / stats.stages[n].parallelism for n in names])
    right.set(title=f"time per stage (bottleneck: {stats.bottleneck})", xlabel="seconds per process")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="measure a pipeline, name its bottleneck, suggest a fix")
    bench.add_argument("target", help="file.py:make_dataset, or a dataset folder / files")
    bench.add_argument("--transform", action="append", default=[], help="module:function map")
    bench.add_argument("--batch-size", type=int, default=256)
    bench.add_argument("--seconds", type=float, default=10.0)
    bench.add_argument("--batches", type=int, default=None, help="stop after this many instead")
    bench.add_argument("--step-time", type=float, default=0.0, help="training step, seconds")
    bench.add_argument("--json", action="store_true", help="print the numbers as JSON")
    bench.add_argument("--plot", default=None, help="write a PNG of throughput and stages")
    bench.set_defaults(run=main)


def main(args: argparse.Namespace) -> int:
    ds = make_target(args)
    stats, samples = run(ds, args.seconds, args.batches, args.step_time, progress=not args.json)
    result = {"stats": stats.to_dict(), "verdict": verdict(stats, args.step_time)}
    if args.plot:
        plot(args.plot, stats, samples)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    v = result["verdict"]
    print(stats.summary())
    bound = (f"input-bound: each step waits for input {stats.wait_fraction:.0%} of the time, "
             f"so training runs {v['slowdown']:.2f}x slower than its step time allows"
             if v["input_bound"] else "not input-bound: the consumer rarely waits")
    print(f"\n{bound}\nsuggestion: {v['suggestion']}")
    return 0
