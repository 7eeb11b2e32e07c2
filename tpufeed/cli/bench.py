"""`tpufeed bench TARGET`: run a pipeline for a while, find its bottleneck, say what to change.

TARGET is `file.py:make_dataset` (a function returning a Dataset) or a dataset — a folder built
by `tpufeed build`, or ArrayRecord/TFRecord/Parquet files — with `--transform module:function`.
`--workers` and `--prefetch` override the pipeline's own settings; `--try` runs the advised
change on the same records and reports what it did; `--trace` writes the run's timeline.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from typing import Any

from tpufeed.cli.advice import CoreClock, Measurement, change_label, verdict
from tpufeed.cli.arguments import (
    Subcommands,
    count_or_auto,
    number_type,
    positive_int,
    positive_seconds,
)
from tpufeed.cli.bench_plot import check_plot_path, check_writable, plot, write_trace
from tpufeed.cli.inputs import INPUT_FORMATS
from tpufeed.cli.json_output import BENCH, add_json_option
from tpufeed.cli.targets import load_callable, make_target
from tpufeed.dataset import Dataset
from tpufeed.errors import plural
from tpufeed.observe import timeline
from tpufeed.run.stats import PipelineStats

__all__ = ["add_parser", "load_callable", "make_target", "run", "run_command", "try_change"]


# A step is slept after each batch: more than a day is no training step, and more than
# time.sleep takes (about 9.2e9 s) was an OverflowError's traceback (found by tests/faults).
_STEP_SECONDS = number_type(
    float, lambda v: math.isfinite(v) and 0 <= v <= 86_400, "a number of seconds from 0 to 86400"
)
_END = object()
_EXIT_INTERRUPTED = 130  # 128 + SIGINT, as `tpufeed` exits on Ctrl-C (cli/program.py)
_HELPS = 1.03  # a measured ratio of rates beyond noise either way


def run(
    ds: Dataset, seconds: float, batches: int | None, step_time: float, progress: bool = True
) -> Measurement:
    """Iterates for `seconds` (or `batches`), sleeping `step_time` per batch like a training
    step; measures the consumer's waits, the cores' use and (time, records so far) samples."""
    from tqdm import tqdm

    start = time.perf_counter()  # the first batch's time includes making the iterator
    it = ds.iterator()
    samples: list[tuple[float, int]] = []
    waits: list[float] = []
    clock: CoreClock | None = None  # from the first batch: the start-up's work is not steady
    interrupted = False
    try:  # closed on Ctrl-C too: no worker outlives the command
        with tqdm(
            total=batches, disable=not progress, unit="batch", desc="bench", file=sys.stderr
        ) as bar:
            try:
                while batches is None or len(samples) < batches:
                    asked = time.perf_counter()
                    if next(it, _END) is _END:
                        break
                    got = time.perf_counter()
                    clock = clock or CoreClock()
                    waits.append(got - asked)
                    timeline.complete("wait for input", got - asked, "consumer")
                    samples.append((got - start, it.records_delivered))
                    bar.update(1)
                    if step_time:
                        time.sleep(step_time)
                        timeline.complete("training step (slept)", step_time, "consumer")
                    if batches is None and got - start >= seconds:
                        break
            except KeyboardInterrupt:  # Ctrl-C: what was measured until then is reported
                if not samples:
                    raise
                interrupted = True
        stats = it.stats()
    finally:
        it.close()
    measured = _measured(stats, samples, waits, clock or CoreClock())
    return dataclasses.replace(measured, interrupted=interrupted)


def _measured(
    stats: PipelineStats, samples: list[tuple[float, int]], waits: list[float], clock: CoreClock
) -> Measurement:
    """The run's numbers, its steady ones taken after the first batch."""
    first = samples[0][0] if samples else 0.0
    span = samples[-1][0] - first if samples else 0.0
    if len(samples) < 2 or span <= 0:  # no steady part to tell apart
        wait, rate = stats.wait_fraction, stats.records_per_s
    else:
        wait, rate = sum(waits[1:]) / span, (samples[-1][1] - samples[0][1]) / span
    return Measurement(stats, samples, first, min(1.0, wait), rate, clock.stop())


def try_change(
    ds: Dataset, change: dict[str, int], before: Measurement, step_time: float, progress: bool
) -> dict[str, Any]:
    """Runs `ds` with `change` on the same records (the same number of batches from the same
    start) and compares its rate after the first batch with `before`'s."""
    changed = ds
    for setting, value in change.items():
        changed = getattr(changed, setting)(value)
    after = run(changed, math.inf, before.stats.batches, step_time, progress)
    ratio = after.steady_rate / before.steady_rate if before.steady_rate > 0 else math.inf
    outcome = (
        "it helps" if ratio >= _HELPS else "it is slower" if ratio <= 1 / _HELPS else "no effect"
    )
    return {
        "change": change,
        "batches": after.stats.batches,
        "records": after.stats.records,
        "before_records_per_s": before.steady_rate,
        "after_records_per_s": after.steady_rate,
        "ratio": ratio,
        "outcome": outcome,
        "first_batch_s": {"before": before.first_batch_s, "after": after.first_batch_s},
    }


def add_parser(sub: Subcommands) -> None:
    """`tpufeed bench TARGET [options]`."""
    bench = sub.add_parser(
        "bench",
        help="measure a pipeline, name its bottleneck, suggest a fix",
        description="Runs TARGET for a while, with a simulated training step of --step-time "
        "seconds per batch, then names the slowest stage and suggests a change. "
        "On a dataset folder (built by `tpufeed build`) records arrive already "
        "decoded, as dicts of arrays: a --transform gets those, so a decode "
        "transform is not needed there, and one is refused before the run.",
    )
    # In the order --help lists them.
    _target_options(bench)
    _setting_options(bench)
    _length_options(bench)
    _report_options(bench)
    bench.set_defaults(run=run_command)


def _target_options(bench: argparse.ArgumentParser) -> None:
    """What runs: the target, and for a dataset or files, how it is read and batched."""
    bench.add_argument(
        "target",
        help="file.py:make_dataset or module:make_dataset (a function "
        "returning a Dataset), or a dataset or MDS folder, or ArrayRecord, "
        "TFRecord, Parquet, WebDataset tar, JSONL or CSV files",
    )
    bench.add_argument(
        "--format",
        choices=INPUT_FORMATS,
        default=None,
        help="of the files (default: from the file name; a folder with index.json is MDS)",
    )
    bench.add_argument(
        "--transform",
        action="append",
        default=[],
        help="module:function or file.py:function mapped over each record of a "
        "dataset or files target (dicts for a dataset or MDS folder, tars, JSONL "
        "and CSV, whose values are strings; bytes for record files); repeat to chain",
    )
    bench.add_argument(
        "--batch-size",
        type=positive_int,
        default=256,
        help="records per batch of a dataset or files target",
    )


def _setting_options(bench: argparse.ArgumentParser) -> None:
    """The pipeline's settings, overridden to try what the advice says."""
    bench.add_argument(
        "--workers",
        type=count_or_auto,
        default=None,
        metavar="N",
        help="N or auto: run with .workers(N) instead of the pipeline's own setting",
    )
    bench.add_argument(
        "--prefetch",
        type=count_or_auto,
        default=None,
        metavar="N",
        help="N or auto: run with .prefetch(N) instead of the pipeline's own setting",
    )
    bench.add_argument(
        "--try",
        dest="try_advice",
        action="store_true",
        help="run the advised change of workers or prefetch again on the same records and "
        "report its measured effect",
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
    add_json_option(bench, BENCH)
    bench.add_argument(
        "--plot",
        default=None,
        help="write a PNG of throughput, stages and records per 0.1 s per process (its "
        "folder is checked before the run)",
    )
    bench.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="write the run's timeline of every process as Chrome trace-event JSON (opens in "
        "https://ui.perfetto.dev)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Benchmarks `args.target` and prints the statistics and the verdict (or JSON); with
    --try, runs the advised change too and reports what it did."""
    if args.plot is not None:
        check_plot_path(args.plot)
    if args.trace is not None:
        check_writable(args.trace, "--trace", "json")
    ds = _with_settings(make_target(args), args)
    progress = not args.json
    recording = timeline.start() if args.trace or args.plot else None
    try:
        measured = run(ds, args.seconds, args.batches, args.step_time, progress)
    finally:
        if recording is not None:
            timeline.stop()
    advice = verdict(measured, args.step_time)
    if args.try_advice and advice["change"] and not measured.interrupted:
        advice["tried"] = try_change(ds, advice["change"], measured, args.step_time, progress)
        advice["measured"] = True
    result = {
        "stats": measured.stats.to_dict(),
        "verdict": advice,
        "trace": args.trace,
        "interrupted": measured.interrupted,
    }
    if args.json:
        BENCH.emit(result)
    else:
        _print_verdict(measured, advice)
    sys.stdout.flush()  # the numbers first: a failed write of a file does not lose them
    if recording is not None and args.trace:
        write_trace(recording, args.trace)
    if recording is not None and args.plot:
        plot(args.plot, measured.stats, measured.samples, recording)
    if measured.interrupted:
        covered = plural(measured.stats.batches, "batch", "batches")
        print(
            f"tpufeed: interrupted: the summary covers the {covered} before Ctrl-C", file=sys.stderr
        )
        return _EXIT_INTERRUPTED
    return 0


def _with_settings(ds: Dataset, args: argparse.Namespace) -> Dataset:
    """`ds` with --workers and --prefetch, where given, instead of its own settings."""
    if args.workers is not None:
        ds = ds.workers(args.workers)
    if args.prefetch is not None:
        ds = ds.prefetch(args.prefetch)
    return ds


def _print_verdict(m: Measurement, v: dict[str, Any]) -> None:
    stats, use = m.stats, m.use
    print(stats.summary())
    busy = (
        f"{use.busy:.1f}"
        if use.busy is not None
        else "not measured (the run was shorter than the kernel's 10 ms tick)"
        if os.path.exists("/proc/stat")
        else "unknown (no /proc/stat)"
    )
    print(
        f"first batch after {m.first_batch_s:.2f} s; after it {m.steady_rate:,.0f} records/s, "
        f"consumer waited {m.steady_wait:.1%}; cores busy {busy} of {use.cores} "
        f"(consumer process {use.consumer:.1f})"
    )
    if v["too_short"]:
        print(f"\n{v['suggestion']}")
    elif v["input_bound"] is None:
        print(f"\nno --step-time: {v['suggestion']}")
    else:
        bound = (
            f"input-bound: after the first batch each step waits for input "
            f"{m.steady_wait:.0%} of the time, so training runs {v['slowdown']:.2f}x slower "
            "than its step time allows"
            if v["input_bound"]
            else "not input-bound: after the first batch the consumer rarely waits"
        )
        print(f"\n{bound}\nsuggestion: {v['suggestion']}")
    note = _measured_note(v)
    if note:
        print(note)


def _measured_note(v: dict[str, Any]) -> str | None:
    """Whether the advice was measured, and what the measurement said."""
    tried, change = v["tried"], v["change"]
    if v["too_short"]:
        return None  # nothing advised
    if tried is not None:
        return (
            f"tried {change_label(change)} on the same {tried['batches']} batches: "
            f"{tried['before_records_per_s']:,.0f} -> {tried['after_records_per_s']:,.0f} "
            f"records/s after the first batch ({tried['ratio']:.2f}x): {tried['outcome']}"
        )
    if change is not None:
        return f"(not measured; run with --try to measure {change_label(change)})"
    if v["input_bound"] is False:
        return None  # nothing advised
    return "(not measured: bench cannot make this change itself)"
