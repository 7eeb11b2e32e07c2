"""What `tpufeed bench` advises, and only what can help.

Each piece of advice is checked against what the run measured: the consumer's wait after the
first batch (the start-up is not a steady cost), the rate the pipeline could give (its stages'
times per record, one after another in each process), and how busy the cores were. More
workers are advised only where cores were idle, a deeper prefetch only where the pipeline
could keep up and a core was free to run ahead, fewer workers where the workers and the
consumer process competed for every core. A change of `workers` or `prefetch` is what
`tpufeed bench --try` runs again and measures.

>>> verdict(measurement, step_time=0.05)["suggestion"]   # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

from tpufeed.errors import plural
from tpufeed.run.autotune import MAX_PREFETCH
from tpufeed.run.resources import cpu_count
from tpufeed.run.stats import PARENT_STAGES, PipelineStats

__all__ = ["Advice", "CoreClock", "CoreUse", "Measurement", "capacity", "change_label", "verdict"]

_INPUT_BOUND = 0.05  # of the time after the first batch, waited for input
_SATURATED = 0.5  # fewer cores' worth idle than this: all busy
# A shorter run says too little to advise on: stage times of a few batches are noise, and the
# kernel counts the cores' use in ticks of 10 ms each.
_JUDGED_BATCHES = 5
_JUDGED_SECONDS = 0.5
# Stages whose work `tpufeed build --transform` can do once, offline: deterministic, one
# record at a time (random_map's draws change every epoch; batch, pack and mix work across
# records, and their output is what training reads).
_MOVABLE = ("map(", "filter(", "flat_map(")


@dataclass(frozen=True)
class CoreUse:
    """How busy the cores were while a pipeline ran (bench: from its first batch, when the
    start-up's work is mostly done). `busy` counts every process on the cores this one may
    run on (other work too; None where /proc/stat is missing); `consumer`, the process that
    iterated (its prefetch and transfer threads, chunks it made itself)."""

    cores: int
    busy: float | None
    consumer: float

    @property
    def free(self) -> float:
        """Cores' worth idle (NaN where unknown)."""
        return self.cores - self.busy if self.busy is not None else math.nan

    @property
    def saturated(self) -> bool:
        return self.busy is not None and self.free < _SATURATED


def _jiffies() -> tuple[int, int] | None:
    """(busy, total) clock ticks of the cores this process may run on, since boot."""
    try:
        mine = {f"cpu{n}" for n in os.sched_getaffinity(0)}
        with open("/proc/stat") as f:
            rows = [line.split() for line in f if line.split(" ", 1)[0] in mine]
    except (OSError, AttributeError):
        return None
    busy = total = 0
    for row in rows:
        ticks = [int(v) for v in row[1:9]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if rows else None


class CoreClock:
    """Measures `CoreUse` from its creation to `stop()`."""

    def __init__(self) -> None:
        self._ticks = _jiffies()
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    def stop(self) -> CoreUse:
        wall = max(time.perf_counter() - self._wall, 1e-9)
        cores, ticks, busy = cpu_count(), _jiffies(), None
        if self._ticks is not None and ticks is not None and ticks[1] > self._ticks[1]:
            busy = cores * (ticks[0] - self._ticks[0]) / (ticks[1] - self._ticks[1])
        return CoreUse(cores, busy, (time.process_time() - self._cpu) / wall)


@dataclass(frozen=True)
class Measurement:
    """What one bench run measured. `steady_wait` and `steady_rate` are taken after the
    first batch (`first_batch_s` after the iterator was made), so a slow start is not
    mistaken for a steady cost."""

    stats: PipelineStats
    samples: list[tuple[float, int]]  # (seconds since the start, records so far) per batch
    first_batch_s: float
    steady_wait: float
    steady_rate: float
    use: CoreUse
    interrupted: bool = False  # Ctrl-C ended the run: these are the batches before it


@dataclass(frozen=True)
class Advice:
    """What to change and why; `change` ({"workers": n} or {"prefetch": n}) is what --try
    runs, None for a change bench cannot make itself (moving work offline, local SSD)."""

    text: str
    change: dict[str, int] | None = None


def change_label(change: dict[str, int]) -> str:
    """`{"workers": 1}` as a user writes it: `.workers(1)`."""
    return "".join(f".{k}({v})" for k, v in change.items())


def capacity(stats: PipelineStats) -> float:
    """Records/s the pipeline could give if never held back by its consumer: the stages of
    each worker run one after another (their times per record add up); the consumer
    process's transfer runs beside them."""
    timed = {n: s for n, s in stats.stages.items() if s.records and s.seconds > 0}
    made = [s for n, s in timed.items() if n not in PARENT_STAGES]
    rates = [s.records_per_s for n, s in timed.items() if n in PARENT_STAGES]
    if made:
        rates.append(1 / sum(1 / s.records_per_s for s in made))
    return min(rates) if rates else math.inf


def _busy(use: CoreUse) -> str:
    return (
        f"{use.busy:.1f} of {plural(use.cores, 'core')} busy"
        if use.busy is not None
        else f"{plural(use.cores, 'core')}, use unknown"
    )


def _more_workers(stats: PipelineStats, use: CoreUse) -> int | None:
    """More workers, where idle cores can run them (the consumer keeps a core if it is busy)."""
    free = use.free if use.busy is not None else use.cores - stats.workers - use.consumer
    n = min(use.cores, stats.workers + math.floor(free + 0.25))  # 3/4 of a core idle counts
    if use.consumer >= 0.5:
        n = min(n, use.cores - 1)
    return n if n > stats.workers else None


def _fewer_workers(stats: PipelineStats, use: CoreUse) -> Advice | None:
    """Fewer workers, where they and a busy consumer process competed for every core."""
    if not use.saturated or use.consumer < 0.5 or stats.workers < use.cores:
        return None
    n = use.cores - 1
    return Advice(
        f"the {plural(stats.workers, 'worker')} and the consumer process ({use.consumer:.1f} "
        f"cores of its own work) compete for {plural(use.cores, 'core')}, all busy: leave it "
        f"a core with .workers({n}) (now {stats.workers})",
        {"workers": n},
    )


def _throughput(stats: PipelineStats, use: CoreUse) -> Advice:
    """What would make the pipeline itself faster, from its slowest stage and the cores."""
    bottleneck = stats.bottleneck
    if bottleneck is None:
        return Advice("no stage was timed: run longer (--seconds) to measure one")
    if bottleneck in PARENT_STAGES:
        return Advice("the transfer to the consumer limits the pipeline: use fewer, larger batches")
    more = _more_workers(stats, use)
    if bottleneck == "read":
        text = (
            "reading records limits the pipeline: put the shards on local SSD or give the "
            "shard cache more room (cache_bytes)"
            if stats.cache_hit_rate is not None  # read through the shard cache
            else "reading records limits the pipeline (the files are local already)"
        )
        if more is None:
            return Advice(text)
        return Advice(
            f"{text}, and read with .workers({more}) (now {stats.workers})", {"workers": more}
        )
    if more is not None:
        return Advice(
            f"{bottleneck} limits the pipeline and cores were idle ({_busy(use)}): run it in "
            f"more processes with .workers({more}) (now {stats.workers})",
            {"workers": more},
        )
    if bottleneck.startswith(_MOVABLE):
        return _fewer_workers(stats, use) or Advice(
            f"{bottleneck} limits the pipeline and no core is idle ({_busy(use)}): move it "
            "offline into `tpufeed build --transform ...`, so training reads its output"
        )
    return _fewer_workers(stats, use) or Advice(
        f"{bottleneck} limits the pipeline and no core is idle ({_busy(use)}): more processes "
        f"cannot help; a cheaper {bottleneck} (fewer or smaller fields per record) or more "
        "cores can"
    )


def _overlap(stats: PipelineStats, use: CoreUse, could: float, needed: float) -> Advice:
    """The pipeline could keep up on average, yet the consumer waited."""
    rates = f"the pipeline could give {could:,.0f} records/s and training takes {needed:,.0f}"
    if stats.workers == 0 and stats.prefetch == 0:
        return Advice(
            f"{rates}, but they take turns in one thread: overlap them with .prefetch(2) (now 0)",
            {"prefetch": 2},
        )
    if use.saturated:
        return _fewer_workers(stats, use) or Advice(
            f"{rates}, but no core was idle ({_busy(use)}, {use.consumer:.1f} of them the "
            "consumer process): more workers or prefetch cannot help; free cores of other work"
            + (
                ", or move transforms offline into `tpufeed build --transform ...`"
                if any(name.startswith(_MOVABLE) for name in stats.stages)
                else ""
            )
        )
    if stats.prefetch < MAX_PREFETCH:
        deeper = min(MAX_PREFETCH, max(2, 2 * stats.prefetch))
        return Advice(
            f"{rates} and cores were idle ({_busy(use)}), but batches come unevenly: buffer "
            f"more of them with .prefetch({deeper}) (now {stats.prefetch})",
            {"prefetch": deeper},
        )
    return Advice(
        f"{rates}, cores were idle and prefetch is {stats.prefetch} already: see when batches "
        "arrive with --trace trace.json (opens in https://ui.perfetto.dev)"
    )


def verdict(m: Measurement, step_time: float) -> dict[str, Any]:
    """Input-bound or not (after the first batch), by how much, and what to change. Without
    a step time (0) there is nothing to be bound by: the verdict is the rate and the
    shortest step it can feed. A run too short to judge is advised nothing."""
    stats, use = m.stats, m.use
    batches_per_s = stats.batches / stats.wall_seconds if stats.wall_seconds else 0.0
    shortest_step = 1 / batches_per_s if batches_per_s else math.inf
    could = capacity(stats)
    common = {
        "batches_per_s": batches_per_s,
        "records_per_s": stats.records_per_s,
        "shortest_step_fed": shortest_step,
        "step_time": step_time,
        "bottleneck": stats.bottleneck,
        "first_batch_s": m.first_batch_s,
        "wait_after_first_batch": m.steady_wait,
        "capacity_records_per_s": could,
        "cores": {"cores": use.cores, "busy": use.busy, "consumer": use.consumer},
    }
    short = _too_short(m)
    if short is not None:
        advised = _advised(Advice(short))
        return {**common, **advised, "input_bound": None, "slowdown": None, "too_short": True}
    if step_time <= 0:
        unbound = _advised(_rate_alone(stats, use, batches_per_s, shortest_step))
        return {**common, **unbound, "input_bound": None, "slowdown": None, "too_short": False}
    input_bound = m.steady_wait > _INPUT_BOUND
    per_batch = stats.records / stats.batches if stats.batches else 0.0
    needed = per_batch / step_time  # records/s that training takes
    if not input_bound:
        advice = Advice("the pipeline keeps up: nothing to change")
    elif could >= 1.1 * needed:
        advice = _overlap(stats, use, could, needed)
    else:
        advice = _throughput(stats, use)
    slowdown = 1 / (1 - m.steady_wait) if m.steady_wait < 1 else math.inf
    bound = {"input_bound": input_bound, "slowdown": slowdown, "too_short": False}
    return {**common, **_advised(advice), **bound}


def _rate_alone(
    stats: PipelineStats, use: CoreUse, batches_per_s: float, shortest_step: float
) -> Advice:
    """Without a step time: the rate, the shortest step it feeds, and what would raise it."""
    per_batch = stats.records / stats.batches if stats.batches else 0.0
    advice = _throughput(stats, use)
    text = (
        f"the pipeline alone delivers {stats.records_per_s:,.0f} records/s "
        f"({batches_per_s:,.1f} batches of {per_batch:,.0f}), enough for a training "
        f"step of {shortest_step * 1000:,.1f} ms or longer; pass --step-time "
        "(your step, in seconds) to learn whether training would wait for it. If "
        f"your step is shorter: {advice.text}"
    )
    return Advice(text, advice.change)


def _too_short(m: Measurement) -> str | None:
    """What a run too short to judge says instead of advice, or None."""
    stats = m.stats
    if stats.batches >= _JUDGED_BATCHES and stats.wall_seconds >= _JUDGED_SECONDS:
        return None
    return (
        f"the run was too short to judge ({plural(stats.batches, 'batch', 'batches')} in "
        f"{stats.wall_seconds:.2f} s; stage times and the cores' use need at least "
        f"{_JUDGED_BATCHES} batches and {_JUDGED_SECONDS} s): run longer, with --seconds "
        "(10 by default) or more --batches, for advice"
    )


def _advised(advice: Advice) -> dict[str, Any]:
    """The advice's fields of the verdict, not yet measured (`--try` measures a change)."""
    return {"suggestion": advice.text, "change": advice.change, "measured": False, "tried": None}
