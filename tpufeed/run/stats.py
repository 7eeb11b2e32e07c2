"""Per-stage statistics of a running pipeline, and the diagnosis of what limits it.

Stages are timed per chunk (`tpufeed.ops.base.StageClock`: two clock reads per stage and chunk,
never per record), in worker processes as in the parent; workers ship their times with each
batch, and their counts (`tpufeed.observe.counts`: bytes read, cache, GCS), which a run reports
as its share (`counts`) and per worker (`per_worker`). A stage's records count every element it
made, wherever: with workers, the calling process's share (`here`) is what it made itself
(while the workers start, instead of waiting, in the `auto` warm-up). The consumer's wait per
`next()` is kept as a histogram over `WAIT_BUCKETS`.

>>> it = iter(tpufeed.Dataset.from_sequence(range(1000)).map(str).batch(10))  # doctest: +SKIP
>>> _ = list(it); print(it.stats().summary())                                 # doctest: +SKIP
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from tpufeed.errors import plural

PARENT_STAGES = ("transfer", "to_device")
# Upper bounds (seconds) of the buckets of the consumer's wait per next(), log-spaced from
# 10 us to 10 s; one more bucket holds the longer waits.
WAIT_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)


def wait_bucket(seconds: float) -> int:
    """The index of the bucket a wait of `seconds` falls in (its bound is >= `seconds`)."""
    return bisect_left(WAIT_BUCKETS, seconds)


@dataclass(frozen=True)
class StageStats:
    seconds: float
    records: int
    parallelism: int  # processes sharing the stage's work

    @property
    def records_per_s(self) -> float:
        """Throughput the stage alone could sustain with its parallelism."""
        return self.records * self.parallelism / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class WorkerStats:
    """One worker process's share of a run: its stages' times and what it counted."""

    worker: int
    pid: int
    stages: dict[str, StageStats]  # parallelism 1: this process alone
    counts: dict[str, int]
    shm_bytes: int = 0  # shared memory its batch slots take now

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "pid": self.pid,
            "stages": {
                n: {"seconds": s.seconds, "records": s.records} for n, s in self.stages.items()
            },
            "counts": dict(self.counts),
            "shm_bytes": self.shm_bytes,
        }


@dataclass(frozen=True)
class PipelineStats:
    """What `DatasetIterator.stats()` returns."""

    wall_seconds: float
    wait_seconds: float
    batches: int
    records: int
    workers: int
    prefetch: int
    queue_depth: int
    memory_bytes: int
    dropped_records: int
    errors: int
    stages: dict[str, StageStats] = field(default_factory=dict)
    tuning: str | None = None  # why "auto" chose these workers/prefetch, if it did
    cut_batches: int = 0  # dropped so that every host ended the epoch at once ("shortest")
    padded_batches: int = 0  # wholly masked batches handed out for that ("pad")
    padded_rows: int = 0  # empty or masked rows: padded batches, short batches, packed epochs' ends
    pack_fill: float | None = None  # share of the packed rows' room that holds tokens
    mixture: list[dict[str, Any]] | None = None  # per component: taken, share, weight
    agreements: int = 0  # steps agreed with the other hosts
    agreement_seconds: float = 0.0  # time spent agreeing
    # This run's share of `tpufeed.observe.counts` (bytes_read, cache_hits, gcs_retries, ...),
    # counted in this process and in its workers.
    counts: dict[str, int] = field(default_factory=dict)
    per_worker: tuple[WorkerStats, ...] = ()  # the workers' shares (the rest is the parent's)
    wait_histogram: tuple[
        int, ...
    ] = ()  # items handed out per bucket of WAIT_BUCKETS of their wait, then longer
    shm_bytes: int = 0  # shared memory the workers' batch slots take now
    pid: int = 0  # the calling process's: with workers, the summary's `here` row is its share

    @property
    def here(self) -> dict[str, StageStats]:
        """The calling process's share of each stage (parallelism 1): what the stage made less
        the workers' shares. With workers, the chunks it made itself (while they started, in
        place of waiting, in the `auto` warm-up) and the stages it runs after theirs; without,
        the whole run."""
        shares = {}
        for name, stage in self.stages.items():
            theirs = [w.stages[name] for w in self.per_worker if name in w.stages]
            seconds = max(0.0, stage.seconds - sum(s.seconds for s in theirs))
            shares[name] = StageStats(seconds, stage.records - sum(s.records for s in theirs), 1)
        return shares

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def wait_fraction(self) -> float:
        """Share of the consumer's wall time spent blocked waiting for input."""
        return self.wait_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def bottleneck(self) -> str | None:
        """The stage with the lowest sustainable throughput."""
        timed = {name: s for name, s in self.stages.items() if s.records and s.seconds > 0}
        return min(timed, key=lambda name: timed[name].records_per_s) if timed else None

    @property
    def cache_hit_rate(self) -> float | None:
        """Share of the opens of gs:// shards that the shard cache served from disk."""
        hits, misses = self.counts.get("cache_hits", 0), self.counts.get("cache_misses", 0)
        return hits / (hits + misses) if hits + misses else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_seconds": self.wall_seconds,
            "wait_seconds": self.wait_seconds,
            "wait_fraction": self.wait_fraction,
            "batches": self.batches,
            "records": self.records,
            "records_per_s": self.records_per_s,
            "workers": self.workers,
            "prefetch": self.prefetch,
            "queue_depth": self.queue_depth,
            "memory_bytes": self.memory_bytes,
            "dropped_records": self.dropped_records,
            "errors": self.errors,
            "bottleneck": self.bottleneck,
            "tuning": self.tuning,
            "cut_batches": self.cut_batches,
            "padded_batches": self.padded_batches,
            "padded_rows": self.padded_rows,
            "agreements": self.agreements,
            "agreement_seconds": self.agreement_seconds,
            "pack_fill": self.pack_fill,
            "mixture": self.mixture,
            "counts": dict(self.counts),
            "cache_hit_rate": self.cache_hit_rate,
            "shm_bytes": self.shm_bytes,
            "wait_histogram": {
                "buckets_s": list(WAIT_BUCKETS),
                "counts": list(self.wait_histogram),
            },
            "per_worker": [w.to_dict() for w in self.per_worker],
            "pid": self.pid,
            "here": {n: {"seconds": s.seconds, "records": s.records} for n, s in self.here.items()},
            "stages": {
                name: {
                    "seconds": s.seconds,
                    "records": s.records,
                    "parallelism": s.parallelism,
                    "records_per_s": s.records_per_s,
                }
                for name, s in self.stages.items()
            },
        }

    def summary(self) -> str:
        lines = [
            f"{plural(self.records, 'record')} in {self._handed_out()} over "
            f"{self.wall_seconds:.2f} s: "
            f"{self.records_per_s:,.0f} records/s; consumer waited {self.wait_fraction:.1%} "
            f"of the time",
            f"workers {self.workers}, prefetch {self.prefetch}, queue depth {self.queue_depth}, "
            f"memory {self.memory_bytes / 2**20:,.1f} MiB, dropped {self.dropped_records}, "
            f"errors {self.errors}" + (f"; auto: {self.tuning}" if self.tuning else ""),
            *(
                [
                    f"hosts ended together: {self.agreements:,} steps agreed in "
                    f"{self.agreement_seconds:.3f} s, {self.cut_batches} batches cut, "
                    f"{self.padded_batches} padded ({self.padded_rows} masked rows)"
                ]
                if self.agreements or self.cut_batches or self.padded_rows
                else []
            ),
            *([f"pack: rows {self.pack_fill:.1%} full"] if self.pack_fill is not None else []),
            *(
                [
                    f"mixture {c['component']}: {c['taken']:,} taken, {c['share']:.1%} of the "
                    f"mix (weight {c['weight']:.1%})"
                    for c in self.mixture or []
                ]
            ),
            *self._storage_lines(),
            f"{'stage':<32} {'seconds':>9} {'records':>11} {'records/s':>12} {'procs':>5}",
        ]
        bottleneck = self.bottleneck
        for name, s in self.stages.items():
            mark = "  <- bottleneck" if name == bottleneck else ""
            rate = f"{s.records_per_s:,.0f}" if s.seconds > 0 else "-"
            lines.append(
                f"{name:<32} {s.seconds:>9.3f} {s.records:>11,} {rate:>12} {s.parallelism:>5}{mark}"
            )
        return "\n".join(lines + self._worker_lines())

    def _handed_out(self) -> str:
        """What the iterator handed out, as a user calls them: batches where the pipeline
        batches, elements where it does not (`batches` counts either)."""
        if "batch" in self.stages:
            return plural(self.batches, "batch", "batches")
        return plural(self.batches, "element")

    def _storage_lines(self) -> list[str]:
        """One line for the shard cache and one per store (GCS, S3, HTTP), each where something
        was counted."""
        c, lines = self.counts, []
        if c.get("cache_hits") or c.get("cache_misses") or c.get("cache_evictions"):
            lines.append(
                f"shard cache: {c.get('cache_hits', 0):,} hits, {c.get('cache_misses', 0):,} "
                f"misses ({self.cache_hit_rate or 0:.1%} hit), {c.get('cache_evictions', 0):,} "
                f"evictions, {c.get('cache_bytes', 0) / 2**20:,.1f} MiB fetched"
            )
        for store, name in (("gcs", "GCS"), ("s3", "S3"), ("http", "HTTP(S) and the Hub")):
            if c.get(f"{store}_requests"):
                lines.append(
                    f"{name}: {c[f'{store}_requests']:,} requests, "
                    f"{c.get(f'{store}_retries', 0):,} retries, "
                    f"{c.get(f'{store}_bytes', 0) / 2**20:,.1f} MiB received"
                )
        return lines

    def _worker_lines(self) -> list[str]:
        """Per worker, and for the calling process (`here`): seconds and records of its busiest
        stage, and the bytes it read. Each stage's records in the table above are the sum of
        these shares."""
        if not self.per_worker:
            return []
        lines = [
            f"{'worker':<8} {'pid':>8} {'busiest stage':<24} {'seconds':>9} {'records':>11} "
            f"{'MiB read':>9}"
        ]
        theirs = sum(w.counts.get("bytes_read", 0) for w in self.per_worker)
        rows = [
            (str(w.worker), w.pid, w.stages, w.counts.get("bytes_read", 0)) for w in self.per_worker
        ]
        rows.append(("here", self.pid, self.here, self.counts.get("bytes_read", 0) - theirs))
        for who, pid, stages, read in rows:
            name, s = max(stages.items(), key=lambda kv: kv[1].seconds, default=("-", None))
            seconds, records = (s.seconds, s.records) if s is not None else (0.0, 0)
            lines.append(
                f"{who:<8} {pid:>8} {name:<24} {seconds:>9.3f} {records:>11,} {read / 2**20:>9.1f}"
            )
        return lines + [
            "here: this process's share (chunks it made while the workers started or instead "
            "of waiting); a stage's records add up all rows'"
        ]

    def progress(self, before: PipelineStats | None = None) -> str:
        """One line for a periodic log: the rate and the consumer's wait since `before` (an
        earlier `stats()` of the same run; None: since the start), the bottleneck, the cache's
        hit rate."""
        seconds = self.wall_seconds - (before.wall_seconds if before else 0.0)
        records = self.records - (before.records if before else 0)
        waited = self.wait_seconds - (before.wait_seconds if before else 0.0)
        hit = self.cache_hit_rate
        return (
            f"tpufeed: {records / seconds if seconds > 0 else 0.0:,.0f} records/s, consumer "
            f"waited {waited / seconds if seconds > 0 else 0.0:.1%} over the last {seconds:.1f} "
            f"s; {self.records:,} records in all; bottleneck {self.bottleneck or '-'}"
            + (f"; cache hit {hit:.1%}" if hit is not None else "")
        )
