"""The files `tpufeed bench` writes: `--plot` (throughput, time per stage, and records per 0.1 s
per process from the run's timeline) and `--trace` (the timeline itself), each checked before
the run so that a path that cannot be written fails at once, not after it.

>>> check_writable("out/trace.json", "--trace", "json")   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from tpufeed.errors import InvalidArgumentError, MissingDependencyError
from tpufeed.observe.timeline import Timeline
from tpufeed.run.stats import PARENT_STAGES, PipelineStats

__all__ = [
    "BIN_S",
    "check_plot_path",
    "check_writable",
    "output_stage",
    "plot",
    "records_per_bin",
    "write_trace",
]

BIN_S = 0.1


def _unwritable(path: str, option: str, suffix: str, error: OSError) -> InvalidArgumentError:
    """`option PATH` cannot be written, saying why in the words of the path."""
    folder = os.path.dirname(os.path.abspath(path))
    if isinstance(error, IsADirectoryError):
        why = f"it is a folder; name a file in it, e.g. {os.path.join(path, 'bench.' + suffix)}"
    elif isinstance(error, NotADirectoryError):
        while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)
        why = f"{folder} is a file, not a folder; name a .{suffix} file in a folder"
    elif isinstance(error, FileNotFoundError) and not os.path.isdir(folder):
        why = f"its folder {folder} does not exist; create it, or name a file in a folder that does"
    else:
        why = f"{error.strerror or error}; name a .{suffix} file in a writable folder"
    return InvalidArgumentError(f"{option} {path} cannot be written: {why}")


def check_writable(path: str, option: str, suffix: str) -> None:
    """Refuses, before the bench runs, an `option` file that could not be written at its end."""
    if not path:
        raise InvalidArgumentError(f"{option} needs a file name, e.g. {option} bench.{suffix}")
    existed = os.path.lexists(path)
    try:
        # Opened to append (changes nothing in a file already there), without blocking on a FIFO.
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644))
        if not existed:
            os.remove(path)
    except OSError as e:
        raise _unwritable(path, option, suffix, e) from e


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
    check_writable(path, "--plot", "png")


def write_trace(recording: Timeline, path: str) -> None:
    """The run's timeline as Chrome trace-event JSON at `path`."""
    try:
        recording.write(path)
    except OSError as e:  # checked before the run, but the folder may have gone since
        raise _unwritable(path, "--trace", "json", e) from e


def output_stage(stats: PipelineStats) -> str | None:
    """The stage whose spans count each record once, in the process that made it: `batch`
    (or the pipeline's last stage without one). Not `transfer`: the consumer process also
    makes batches itself, and only worker-made ones are transferred."""
    made = [name for name in stats.stages if name not in PARENT_STAGES]
    return "batch" if "batch" in made else (made[-1] if made else None)


def records_per_bin(timeline: Timeline, stage: str) -> dict[int, list[int]]:
    """Per process id: records through `stage` in each 0.1 s since the timeline began (a
    span's records count where it ended)."""
    bins: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for name, category, start, duration, pid, _, args in list(timeline.events):
        if name == stage and category == "stage" and duration >= 0 and args:
            end = (start + duration - timeline.started_ns) / 1e9
            bins[pid][max(0, int(end / BIN_S))] += args.get("records", 0)
    length = 1 + max((max(b) for b in bins.values()), default=0)
    return {pid: [b.get(k, 0) for k in range(length)] for pid, b in sorted(bins.items())}


def plot(
    path: str,
    stats: PipelineStats,
    samples: list[tuple[float, int]],
    timeline: Timeline | None = None,
) -> None:
    """Throughput, time per stage, and (from `timeline`) records made per 0.1 s per process."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    step = max(1, len(samples) // 50)  # ~50 points, each a rate over several batches
    points = samples[::step]
    rates = [
        (r1 - r0) / (t1 - t0) if t1 > t0 else 0.0 for (t0, r0), (t1, r1) in zip(points, points[1:])
    ]
    axes[0].plot([t for t, _ in points[1:]], rates)
    axes[0].set(title="throughput", xlabel="seconds", ylabel="records/s")
    names = list(stats.stages)
    axes[1].barh(names, [stats.stages[n].seconds / stats.stages[n].parallelism for n in names])
    axes[1].set(
        title=f"time per stage (bottleneck: {stats.bottleneck})", xlabel="seconds per process"
    )
    _per_process(axes[2], stats, timeline)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:  # checked before the run, but the folder may have gone since
        raise _unwritable(path, "--plot", "png", e) from e
    finally:
        plt.close(fig)


def _per_process(ax: Any, stats: PipelineStats, timeline: Timeline | None) -> None:
    """Records per 0.1 s of each process, from the timeline's spans of the output stage."""
    stage = output_stage(stats)
    per_pid = records_per_bin(timeline, stage) if timeline is not None and stage else {}
    for pid, counts in per_pid.items():
        label = timeline.processes.get(pid, f"worker pid {pid}") if timeline else str(pid)
        ax.step([k * BIN_S for k in range(len(counts))], counts, where="post", label=label)
    if per_pid:
        ax.legend(fontsize="small")
    ax.set(
        title=f"records per {BIN_S:g} s per process ({stage} spans)",
        xlabel="seconds",
        ylabel="records",
    )
