"""One host's summary of its input pipeline over an interval, and the pod's: what
`tpufeed.pod_stats()` returns and what each host shares with the others.

A `Meter` takes the process's figures (`tpufeed.run.live`: every iterator's records, the
consumer's wait and each stage's time; `tpufeed.observe.counts`: the shard cache's hits; the
host's CPU from /proc/stat) and turns what changed since its last reading into a
`HostSummary`: a few numbers, about 300 bytes of JSON. Reading them costs a few dict copies and
one small file read, never anything per record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from tpufeed.errors import CorruptDataError
from tpufeed.observe import counts
from tpufeed.ops.base import now
from tpufeed.run import live

__all__ = ["HostSummary", "Meter", "PodStats", "host_cpu_times"]


@dataclass(frozen=True)
class HostSummary:
    """One host's input pipeline over its last interval (`interval_s` long, ending at
    `taken_at`, a Unix time by that host's clock).

    `wait_fraction` is the share of that time the training loop spent waiting in `next()` for
    input (the step's input wait; through to_jax, to_tf or to_torch, the loop's own wait on
    the adapter, which transfers ahead on a thread); `bottleneck` the stage with the lowest
    throughput over the interval (None: no stage ran); `cpu_busy` the share of `cores`, the
    cores the process may run on (all the host's, or fewer under a CPU limit), that were busy,
    whoever used them (None where /proc/stat cannot be read); `cache_hit_rate` the share of
    remote shards' opens the shard cache served from disk so far (None: none opened);
    `shm_bytes` the shared memory the workers' batches hold now. `age_s` is how old the
    summary was when read: a host that is gone stops sharing, and its last summary only
    ages."""

    host: int
    hosts: int
    records_per_s: float
    wait_fraction: float
    bottleneck: str | None
    cpu_busy: float | None
    cores: int
    cache_hit_rate: float | None
    shm_bytes: int
    interval_s: float
    taken_at: float
    age_s: float = 0.0

    def to_json(self) -> str:
        """The summary as one host shares it (without `age_s`, which a reader computes)."""
        shared = asdict(self)
        del shared["age_s"]
        return json.dumps(shared, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, key: str, read_at: float) -> HostSummary:
        """A summary another host shared under `key`, aged as of `read_at` (a Unix time)."""
        try:
            given = json.loads(text)
            shared = {name: given[name] for name in _SHARED}  # a later version's extra: left
            summary = cls(**shared)
            int(summary.host), float(summary.taken_at), float(summary.wait_fraction)
        except (TypeError, ValueError, KeyError) as exc:
            raise CorruptDataError(
                f"pod summary {key!r} is not one tpufeed shares ({exc}): {text[:120]!r}"
            ) from None
        return dataclasses.replace(summary, age_s=max(0.0, read_at - summary.taken_at))

    def line(self) -> str:
        """The summary in one line, as `PodStats.summary()` lists hosts."""
        cpu = f"{self.cpu_busy:.0%}" if self.cpu_busy is not None else "-"
        hit = f"{self.cache_hit_rate:.0%}" if self.cache_hit_rate is not None else "-"
        return (
            f"host {self.host:>4}  {self.records_per_s:>12,.0f} rec/s  wait "
            f"{self.wait_fraction:>4.0%}  {self.bottleneck or '-':<20} CPU {cpu:>4} of "
            f"{self.cores} cores  cache hit {hit:>4}  shm {self.shm_bytes / 2**20:,.1f} MiB  "
            f"{self.age_s:.1f} s old"
        )


_SHARED = [f.name for f in fields(HostSummary) if f.name != "age_s"]


@dataclass(frozen=True)
class PodStats:
    """What `tpufeed.pod_stats()` returns: every host's latest summary (`hosts`, by host
    index), the hosts of the run (`host_count`), those from which nothing was read yet
    (`missing`), and what the fresh ones say, judged as process 0 judges them (`verdict`: the
    line it logs, None where no host holds the step and the pod is not input-bound)."""

    hosts: tuple[HostSummary, ...]
    host_count: int
    missing: tuple[int, ...] = ()
    verdict: str | None = None

    def host(self, index: int) -> HostSummary | None:
        """Host `index`'s summary, or None if none was read."""
        return next((s for s in self.hosts if s.host == index), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": [asdict(s) for s in self.hosts],
            "host_count": self.host_count,
            "missing": list(self.missing),
            "verdict": self.verdict,
        }

    def summary(self) -> str:
        lines = [f"{len(self.hosts)} of {self.host_count} hosts' input pipelines"]
        lines += [s.line() for s in self.hosts]
        if self.missing:
            lines.append(f"nothing shared yet by host(s) {', '.join(map(str, self.missing))}")
        if self.verdict:
            lines.append(self.verdict)
        return "\n".join(lines)


def host_cpu_times(cpus: frozenset[int] | None = None) -> tuple[float, float] | None:
    """(busy, total) CPU time so far of the host's `cpus` (None: all of them), in clock ticks
    (/proc/stat), or None where there is no /proc/stat or it names none of them."""
    try:
        with open("/proc/stat", "rb") as f:
            lines = [line.split() for line in f if line.startswith(b"cpu")]
    except OSError:
        return None
    if cpus is None:
        chosen = [line[1:] for line in lines if line[0] == b"cpu"]
    else:
        chosen = [line[1:] for line in lines if line[0][3:].isdigit() and int(line[0][3:]) in cpus]
    busy = total = 0.0
    for ticks in ([float(t) for t in line] for line in chosen):
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)  # idle and iowait
        busy, total = busy + sum(ticks) - idle, total + sum(ticks)
    return (busy, total) if chosen else None


def _cores_allowed() -> frozenset[int] | None:
    """The cores this process may run on (its affinity: a CPU limit), None where unknown."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:
        return None


# when, every run's figures, the cores' CPU times, the device adapters' loops' waits
_Reading = tuple[float, live.RunFigures, tuple[float, float] | None, tuple[int, float]]


class Meter:
    """Takes this process's figures and makes the summary of what changed since the last
    `take()` (the first: since the Meter was made)."""

    def __init__(self, host: int, hosts: int):
        self._host, self._hosts = host, hosts
        self._cpus = _cores_allowed()
        self._cores = len(self._cpus) if self._cpus else os.cpu_count() or 1
        self._last = self._read()

    def take(self) -> HostSummary:
        at, figures, cpu, loop = current = self._read()
        then, before, cpu_before, loop_before = self._last
        self._last = current
        seconds = max(at - then, 1e-9)
        counted = counts.snapshot()
        hits, misses = counted.get("cache_hits", 0), counted.get("cache_misses", 0)
        if loop[0] > loop_before[0]:  # a device adapter's loop: its own wait, not its thread's
            waited = loop[1] - loop_before[1]
        else:
            waited = figures.wait_seconds - before.wait_seconds
        return HostSummary(
            host=self._host,
            hosts=self._hosts,
            records_per_s=(figures.records - before.records) / seconds,
            wait_fraction=min(1.0, max(0.0, waited) / seconds),
            bottleneck=_bottleneck(before, figures),
            cpu_busy=_busy(cpu_before, cpu),
            cores=self._cores,
            cache_hit_rate=hits / (hits + misses) if hits + misses else None,
            shm_bytes=figures.shm_bytes,
            interval_s=round(seconds, 3),
            taken_at=time.time(),
        )

    def _read(self) -> _Reading:
        return now(), live.totals()[0], host_cpu_times(self._cpus), live.loop_waits()


def _bottleneck(before: live.RunFigures, after: live.RunFigures) -> str | None:
    """The stage with the most seconds a record over the interval (the lowest throughput
    with its parallelism), among those that made records in it."""
    per_record = {}
    for name, seconds in after.stage_seconds.items():
        records = after.stage_records.get(name, 0) - before.stage_records.get(name, 0)
        spent = seconds - before.stage_seconds.get(name, 0.0)
        if records > 0 and spent > 0:
            per_record[name] = spent / records
    return max(per_record, key=per_record.__getitem__) if per_record else None


def _busy(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return min(1.0, max(0.0, (after[0] - before[0]) / (after[1] - before[1])))
