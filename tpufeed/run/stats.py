"""Per-stage statistics of a running pipeline, and the diagnosis of what limits it.

Stages are timed per chunk (`tpufeed.ops.base.StageClock`: two clock reads per stage and chunk,
never per record), in worker processes as in the parent; workers ship their times with each
batch.

>>> it = iter(tpufeed.Dataset.from_sequence(range(1000)).map(str).batch(10))  # doctest: +SKIP
>>> _ = list(it); print(it.stats().summary())                                 # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpufeed.errors import plural

PARENT_STAGES = ("transfer", "to_device")


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
            f"{plural(self.records, 'record')} in {plural(self.batches, 'item')} over "
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
            f"{'stage':<32} {'seconds':>9} {'records':>11} {'records/s':>12} {'procs':>5}",
        ]
        bottleneck = self.bottleneck
        for name, s in self.stages.items():
            mark = "  <- bottleneck" if name == bottleneck else ""
            rate = f"{s.records_per_s:,.0f}" if s.seconds > 0 else "-"
            lines.append(
                f"{name:<32} {s.seconds:>9.3f} {s.records:>11,} {rate:>12} {s.parallelism:>5}{mark}"
            )
        return "\n".join(lines)
