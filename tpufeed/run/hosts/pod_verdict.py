"""The pod's verdict: which host's input holds the step, or whether input holds every host.

A synchronous step waits for the slowest host. A host whose input pipeline is too slow waits in
`next()` for its batches; the others, fed in time, wait for it in the step's collective instead,
so their input wait stays low. A host therefore *holds the step* when its input wait stands out
from the others': at least `MARGIN` (10 points) above the median of the other hosts' waits, and
at least `RATIO` (2) times that median, so that neither noise around a low median (3% against
1%) nor a spread around a high one (45% against 35%) names a host. When no host stands out but
the median wait of all hosts is `INPUT_BOUND` (10%) or more, the whole pod is input-bound.

Only fresh summaries are judged: one older than `STALE_INTERVALS` intervals comes from a host
that stopped sharing (gone, stopped, cut off), which is said once, in its own line.

`Verdicts` turns each round's judgement into log lines: a line when the verdict changes (a
host starts or stops holding the step, its bottleneck changes), never the same line each
interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from tpufeed.run.hosts.pod_summary import HostSummary

__all__ = ["INPUT_BOUND", "MARGIN", "RATIO", "STALE_INTERVALS", "Verdict", "Verdicts", "judge"]

INPUT_BOUND = 0.10  # the median input wait at which input holds the whole pod
MARGIN = 0.10  # how far above the others' median a host's wait must be to stand out
RATIO = 2.0  # and how many times that median
STALE_INTERVALS = 3.0  # a summary older than this many intervals: its host stopped sharing


@dataclass(frozen=True)
class Verdict:
    """What holds the pod: `kind` "host" (`host` holds the step) or "pod" (input-bound
    everywhere); `line` says it."""

    kind: str
    host: int | None
    bottleneck: str | None
    line: str


def fresh(summaries: Sequence[HostSummary], interval_s: float) -> list[HostSummary]:
    """The summaries of hosts still sharing: none older than `STALE_INTERVALS` intervals."""
    return [s for s in summaries if s.age_s <= STALE_INTERVALS * max(interval_s, s.interval_s)]


def judge(summaries: Sequence[HostSummary], host_count: int) -> Verdict | None:
    """The verdict over fresh summaries (`fresh`), or None: no host stands out and the pod is
    not input-bound, or fewer than two hosts to compare."""
    if len(summaries) < 2:
        return None
    worst = max(summaries, key=lambda s: (s.wait_fraction, -s.host))
    others = median(s.wait_fraction for s in summaries if s is not worst)
    if worst.wait_fraction >= others + MARGIN and worst.wait_fraction >= RATIO * others:
        line = (
            f"host {worst.host} of {host_count} holds the step: input wait "
            f"{worst.wait_fraction:.0%} (median {others:.0%}), bottleneck: "
            f"{worst.bottleneck or 'none timed'}, {_cpu(worst.cpu_busy, worst.cores)}"
        )
        return Verdict("host", worst.host, worst.bottleneck, line)
    middle = median(s.wait_fraction for s in summaries)
    if middle < INPUT_BOUND:
        return None
    stages = Counter(s.bottleneck for s in summaries if s.bottleneck)
    stage, on = stages.most_common(1)[0] if stages else (None, 0)
    busy = [s.cpu_busy for s in summaries if s.cpu_busy is not None]
    line = (
        f"the pod is input-bound: input wait {middle:.0%} (median of {len(summaries)} hosts; "
        f"host {worst.host} the most, {worst.wait_fraction:.0%}), bottleneck: "
        f"{stage or 'none timed'} on {on} of {len(summaries)} hosts, "
        f"{_cpu(median(busy) if busy else None, median(s.cores for s in summaries))} (median)"
    )
    return Verdict("pod", None, stage, line)


def _cpu(busy: float | None, cores: float) -> str:
    if busy is None:
        return f"CPU not measured, {cores:g} cores"
    return f"CPU {busy:.0%} of {cores:g} cores"


class Verdicts:
    """Process 0's verdicts, round after round: `update` gives the lines to log (a change of
    verdict, a host that went silent), none when nothing changed."""

    def __init__(self) -> None:
        self._last: Verdict | None = None
        self._silent: set[int] = set()

    def update(
        self, summaries: Sequence[HostSummary], host_count: int, interval_s: float
    ) -> list[str]:
        live = fresh(summaries, interval_s)
        lines = self._silence(summaries, live, host_count, interval_s)
        verdict = judge(live, host_count)
        key = (verdict.kind, verdict.host, verdict.bottleneck) if verdict else None
        last = self._last
        if key != ((last.kind, last.host, last.bottleneck) if last else None):
            if verdict is not None:
                lines.append(verdict.line)
            elif last is not None and len(live) >= 2:
                waits = median(s.wait_fraction for s in live)
                lines.append(
                    f"input no longer holds the pod's step: median input wait {waits:.0%} over "
                    f"{len(live)} hosts"
                )
            self._last = verdict
        return lines

    def _silence(
        self,
        summaries: Sequence[HostSummary],
        live: Sequence[HostSummary],
        host_count: int,
        interval_s: float,
    ) -> list[str]:
        """A line for each host that stopped sharing since the last round."""
        sharing = {s.host for s in live}
        self._silent &= {s.host for s in summaries} - sharing  # back to sharing: said again
        lines = []
        for s in summaries:
            if s.host not in sharing and s.host not in self._silent:
                self._silent.add(s.host)
                lines.append(
                    f"host {s.host} of {host_count} has shared nothing for {s.age_s:.0f} s "
                    f"(one summary every {interval_s:g} s): it is gone, stopped or cut off; "
                    "its last summary is left out of the verdict"
                )
        return lines
