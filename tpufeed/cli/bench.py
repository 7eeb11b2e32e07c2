"""`tpufeed bench TARGET`: run a pipeline for a while, find its bottleneck, say what to change.

TARGET is `file.py:make_dataset` (a function returning a Dataset) or a dataset — a folder built
by `tpufeed build`, or ArrayRecord/TFRecord/Parquet files — with `--transform module:function`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from typing import Any

from tpufeed.cli.arguments import Subcommands, number_type, positive_int, positive_seconds
from tpufeed.dataset import Dataset
from tpufeed.errors import InvalidArgumentError, MissingDependencyError, TpufeedError, plural
from tpufeed.ops.user_functions import is_interruption
from tpufeed.run.resources import cpu_count
from tpufeed.run.stats import PipelineStats
from tpufeed.sources.formats import FORMATS

__all__ = [
    "add_parser",
    "check_plot_path",
    "load_callable",
    "make_target",
    "plot",
    "run",
    "run_command",
    "verdict",
]


# A step is slept after each batch: more than a day is no training step, and more than
# time.sleep takes (about 9.2e9 s) was an OverflowError's traceback (found by tests/faults).
_STEP_SECONDS = number_type(
    float, lambda v: math.isfinite(v) and 0 <= v <= 86_400, "a number of seconds from 0 to 86400"
)


def load_callable(spec: str, option: str = "--transform") -> Any:
    """`module:function` (found in the current directory too) or `path/to/file.py:function`
    (whose imports find the modules next to it)."""
    from tpufeed.beam.user_transforms import load_transform

    return load_transform(spec, option)


def make_target(args: argparse.Namespace) -> Dataset:
    target = args.target
    if ":" in target and not target.startswith("gs://") and not os.path.exists(target):
        ds = _called(target)
        if not isinstance(ds, Dataset):
            raise InvalidArgumentError(
                f"{target} returned {type(ds).__name__}, not a tpufeed.Dataset"
            )
        return ds
    from tpufeed.cli.inspection import folder_shards
    from tpufeed.sources.formats import get_format, guess_format
    from tpufeed.sources.manifest import is_dataset_path
    from tpufeed.storage.local import expand_paths

    plain = folder_shards(target)
    if plain is not None:  # a folder of shards with no manifest, as `tpufeed quickstart` writes
        file_format, files = plain
        fmt = get_format(file_format)
    elif is_dataset_path(target):
        return _prepared(Dataset.open(target), args)
    else:
        files = expand_paths([target])
        fmt = (
            get_format(args.format, "--format")
            if getattr(args, "format", None)
            else guess_format(files[0])
        )
    return _prepared(getattr(Dataset, fmt.constructor)(files), args)


def _called(target: str) -> Any:
    """What the function named by `target` returns; what it raises (a bug in the user's
    file, or arguments it needs) is one error naming the target, with its traceback."""
    make = load_callable(target, "target")
    try:
        return make()
    except TpufeedError:
        raise
    except BaseException as e:  # SystemExit & co. too: the command ends in one named error
        if is_interruption(e):
            raise
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise InvalidArgumentError(
            f"target {target} raised {type(e).__name__}: {e} (it is called with no "
            f"arguments and must return a tpufeed.Dataset)\n{tb}"
        ) from e


def _prepared(ds: Dataset, args: argparse.Namespace) -> Dataset:
    """`ds` shuffled, with the --transform maps, batched and repeated: what bench runs."""
    ds = ds.shuffle(0)
    for spec in args.transform:
        ds = ds.map(load_callable(spec))
    return ds.batch(args.batch_size).repeat()


def run(
    ds: Dataset, seconds: float, batches: int | None, step_time: float, progress: bool = True
) -> tuple[PipelineStats, list[tuple[float, int]]]:
    """Iterates for `seconds` (or `batches`), sleeping `step_time` per batch like a training
    step; returns the statistics and (time, records so far) samples for the plot."""
    from tqdm import tqdm

    it = ds.iterator()
    samples: list[tuple[float, int]] = []
    start = time.perf_counter()
    try:  # closed on Ctrl-C too: no worker outlives the command
        with tqdm(
            total=batches, disable=not progress, unit="batch", desc="bench", file=sys.stderr
        ) as bar:
            for count, _ in enumerate(it, 1):
                elapsed = time.perf_counter() - start
                samples.append((elapsed, it.records_delivered))
                bar.update(1)
                if step_time:
                    time.sleep(step_time)
                if (batches is not None and count >= batches) or (
                    batches is None and elapsed >= seconds
                ):
                    break
        stats = it.stats()
    finally:
        it.close()
    return stats, samples


def _speedup(stats: PipelineStats) -> str:
    """What would make the pipeline itself faster, from its slowest stage."""
    bottleneck, cores = stats.bottleneck, cpu_count()
    if bottleneck not in (None, "transfer", "read"):
        if stats.workers < cores:
            return (
                f"{bottleneck} limits the pipeline: run it in more processes with "
                f".workers({cores}) (now {stats.workers})"
            )
        return (
            f"{bottleneck} limits the pipeline and all {plural(cores, 'core')} run it: move it "
            "offline into `tpufeed build --transform ...`, so training reads its output"
        )
    if bottleneck == "read":
        return (
            "reading records limits the pipeline: put the shards on local SSD or give "
            "the shard cache more room (cache_bytes), and read with more workers"
        )
    return "the transfer to the consumer limits the pipeline: use fewer, larger batches"


def verdict(stats: PipelineStats, step_time: float) -> dict[str, Any]:
    """Input-bound or not, by how much, and what to change. Without a step time (0) there is
    nothing to be bound by: the verdict is the rate and the shortest step it can feed."""
    batches_per_s = stats.batches / stats.wall_seconds if stats.wall_seconds else 0.0
    per_batch = stats.records / stats.batches if stats.batches else 0.0
    shortest_step = 1 / batches_per_s if batches_per_s else float("inf")
    common = {
        "batches_per_s": batches_per_s,
        "records_per_s": stats.records_per_s,
        "shortest_step_fed": shortest_step,
        "step_time": step_time,
        "bottleneck": stats.bottleneck,
    }
    if step_time <= 0:
        advice = (
            f"the pipeline alone delivers {stats.records_per_s:,.0f} records/s "
            f"({batches_per_s:,.1f} batches of {per_batch:,.0f}), enough for a training "
            f"step of {shortest_step * 1000:,.1f} ms or longer; pass --step-time "
            "(your step, in seconds) to learn whether training would wait for it. If "
            f"your step is shorter: {_speedup(stats)}"
        )
        return {**common, "input_bound": None, "slowdown": None, "suggestion": advice}
    input_bound = stats.wait_fraction > 0.05
    needed = per_batch / step_time  # records/s that training takes
    capacity = stats.stages[stats.bottleneck].records_per_s if stats.bottleneck else float("inf")
    if not input_bound:
        advice = "the pipeline keeps up: nothing to change"
    elif capacity >= 1.1 * needed:
        advice = (
            f"the pipeline could give {capacity:,.0f} records/s and training takes "
            f"{needed:,.0f}, but they take turns: overlap them with "
            f".prefetch({max(2, 2 * stats.prefetch)}) (now {stats.prefetch})"
        )
    else:
        advice = _speedup(stats)
    slowdown = 1 / (1 - stats.wait_fraction) if stats.wait_fraction < 1 else float("inf")
    return {**common, "input_bound": input_bound, "slowdown": slowdown, "suggestion": advice}


def _unwritable(path: str, error: OSError) -> InvalidArgumentError:
    """`--plot PATH` cannot be written, saying why in the words of the path."""
    folder = os.path.dirname(os.path.abspath(path))
    if isinstance(error, IsADirectoryError):
        why = f"it is a folder; name a file in it, e.g. {os.path.join(path, 'bench.png')}"
    elif isinstance(error, NotADirectoryError):
        while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)
        why = f"{folder} is a file, not a folder; name a .png file in a folder"
    elif isinstance(error, FileNotFoundError):
        why = f"its folder {folder} does not exist; create it, or name a file in a folder that does"
    else:
        why = f"{error.strerror or error}; name a .png file in a writable folder"
    return InvalidArgumentError(f"--plot {path} cannot be written: {why}")


def check_plot_path(path: str) -> None:
    """Refuses, before the bench runs, a --plot file that could not be written at its end:
    matplotlib missing, a format it does not write, a folder missing or read-only."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "matplotlib":
            raise MissingDependencyError(
                "--plot needs matplotlib, which is not installed; "
                "install it with `pip install matplotlib`, or leave "
                "out --plot"
            ) from e
        raise
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise InvalidArgumentError(
            f"--plot {path}: matplotlib cannot write .{suffix} files; "
            f"name a .png file (or one of .{', .'.join(sorted(formats))})"
        )
    existed = os.path.lexists(path)
    try:
        # Opened to append (changes nothing in a file already there), without blocking on a FIFO.
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644))
        if not existed:
            os.remove(path)
    except OSError as e:
        raise _unwritable(path, e) from e


def plot(path: str, stats: PipelineStats, samples: list[tuple[float, int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    step = max(1, len(samples) // 50)  # ~50 points, each a rate over several batches
    points = samples[::step]
    rates = [
        (r1 - r0) / (t1 - t0) if t1 > t0 else 0.0 for (t0, r0), (t1, r1) in zip(points, points[1:])
    ]
    left.plot([t for t, _ in points[1:]], rates)
    left.set(title="throughput", xlabel="seconds", ylabel="records/s")
    names = list(stats.stages)
    right.barh(names, [stats.stages[n].seconds / stats.stages[n].parallelism for n in names])
    right.set(
        title=f"time per stage (bottleneck: {stats.bottleneck})", xlabel="seconds per process"
    )
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:  # checked before the run, but the folder may have gone since
        raise _unwritable(path, e) from e
    finally:
        plt.close(fig)


def add_parser(sub: Subcommands) -> None:
    """`tpufeed bench TARGET [options]`."""
    bench = sub.add_parser(
        "bench",
        help="measure a pipeline, name its bottleneck, suggest a fix",
        description="Runs TARGET for a while, with a simulated training step of --step-time "
        "seconds per batch, then names the slowest stage and suggests a change. "
        "On a dataset folder (built by `tpufeed build`) records arrive already "
        "decoded, as dicts of arrays: a --transform gets those, so a decode "
        "transform is not needed there and fails with CodecError.",
    )
    # In the order --help lists them.
    _target_options(bench)
    _length_options(bench)
    _report_options(bench)
    bench.set_defaults(run=run_command)


def _target_options(bench: argparse.ArgumentParser) -> None:
    """What runs: the target, and for a dataset or files, how it is read and batched."""
    bench.add_argument(
        "target",
        help="file.py:make_dataset or module:make_dataset (a function "
        "returning a Dataset), or a dataset folder, ArrayRecord "
        "or TFRecord files",
    )
    bench.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default=None,
        help="of record files (default: from the file name)",
    )
    bench.add_argument(
        "--transform",
        action="append",
        default=[],
        help="module:function or file.py:function mapped over each record of a "
        "dataset or files target (decoded dicts for a dataset folder, "
        "bytes for record files); repeat to chain",
    )
    bench.add_argument(
        "--batch-size",
        type=positive_int,
        default=256,
        help="records per batch of a dataset or files target",
    )


def _length_options(bench: argparse.ArgumentParser) -> None:
    """How long it runs, and the training step it feeds."""
    bench.add_argument("--seconds", type=positive_seconds, default=10.0, help="how long to run")
    bench.add_argument(
        "--batches",
        type=positive_int,
        default=None,
        help="stop after this many batches instead of --seconds",
    )
    bench.add_argument(
        "--step-time",
        type=_STEP_SECONDS,
        default=0.0,
        help="seconds of one training step, slept after each batch; 0 measures "
        "the pipeline alone and reports the shortest step it can feed",
    )


def _report_options(bench: argparse.ArgumentParser) -> None:
    """How the result is given: as JSON, and as a plot."""
    bench.add_argument("--json", action="store_true", help="print the numbers as JSON")
    bench.add_argument(
        "--plot",
        default=None,
        help="write a PNG of throughput and stages (its folder is checked before the run)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Benchmarks `args.target` and prints the statistics and the verdict (or JSON)."""
    if args.plot:
        check_plot_path(args.plot)
    ds = make_target(args)
    stats, samples = run(ds, args.seconds, args.batches, args.step_time, progress=not args.json)
    result = {"stats": stats.to_dict(), "verdict": verdict(stats, args.step_time)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_verdict(stats, result["verdict"])
    if args.plot:  # after the numbers: a failed write does not lose them
        sys.stdout.flush()
        plot(args.plot, stats, samples)
    return 0


def _print_verdict(stats: PipelineStats, v: dict[str, Any]) -> None:
    print(stats.summary())
    if v["input_bound"] is None:
        print(f"\nno --step-time: {v['suggestion']}")
    else:
        bound = (
            f"input-bound: each step waits for input {stats.wait_fraction:.0%} of the "
            f"time, so training runs {v['slowdown']:.2f}x slower than its step time "
            "allows"
            if v["input_bound"]
            else "not input-bound: the consumer rarely waits"
        )
        print(f"\n{bound}\nsuggestion: {v['suggestion']}")
