"""Which Beam runner a build runs on, and whether its result can be trusted.

Locally the build runs on Beam's in-process runner (FnApiRunner: it never downloads Prism);
`workers=N` runs its bundles in N worker processes (what Beam's `multi_processing` mode
starts, through `tpufeed.beam.workers.worker_process`), which gives byte-identical shards; Beam's own
`--direct_running_mode=multi_processing` is accepted too. Refused, each with its reason:
- `multi_threading`: several threads in FnApiRunner lose records (Beam 2.77: a plain
  Create | Map | Reshuffle | Count of (int, 250-byte) pairs lost records in 5 of 6 runs);
- `in_memory` with several workers: it runs one worker at a time and only looks parallel;
- DaskRunner: it does not separate tagged outputs and runs only the last branch of a graph;
- BundleBasedDirectRunner: a side input made from a step with tagged outputs arrives empty.
After the run, the steps' own counters are compared with the manifest; a runner that reports
no counters fails the build, because lost records would then go unnoticed.
Any other runner is Beam's to make. The portable ones (PortableRunner, Flink, Spark) report
the counters through their job service, and are tested with Beam's embedded job server and
LOOPBACK or worker-pool workers; `tpufeed.beam.workers.worker_check` first checks their workers.
"""

from __future__ import annotations

import logging
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from tpufeed.errors import InvalidArgumentError, TpufeedError

__all__ = ["COUNTERS", "check_counts", "in_process_runner", "runner_for", "worker_args"]

COUNTERS = ("records_in", "records_out", "records_written")
_IN_PROCESS_RUNNERS = {
    None,
    "directrunner",
    "direct",
    "fnapirunner",
    "switchingdirectrunner",
    "apache_beam.runners.portability.fn_api_runner.fnapirunner",
    "apache_beam.runners.portability.fn_api_runner.fn_runner.fnapirunner",
    "apache_beam.runners.direct.direct_runner.directrunner",
}
_REFUSED_RUNNERS = {
    "daskrunner": "it does not separate a step's tagged outputs and runs only the last branch "
    "of a graph with several, so records go missing and shards differ between "
    "runs (seen with apache-beam 2.77); build with --workers N locally or on "
    "Dataflow, Flink or Spark",
    "bundlebaseddirectrunner": "a side input made from a step with tagged outputs arrives "
    "empty there (apache-beam 2.77), so the record summaries and "
    "counts would be lost; leave --runner out (Beam's in-process "
    "FnApiRunner) or pass --runner FnApiRunner",
}
_LOSES_RECORDS = (
    "Beam's multi_threading mode loses records (apache-beam 2.77: a plain "
    "Create | Map | Reshuffle | Count lost records in 5 of 6 runs)"
)


def in_process_runner() -> beam.runners.PipelineRunner:
    """Beam's in-process runner; unlike the plain DirectRunner it never downloads Prism."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return FnApiRunner()


def _runner_name(options: PipelineOptions) -> str | None:
    name = options.view_as(StandardOptions).runner
    if name is None:
        return None
    return name if isinstance(name, str) else type(name).__name__


def worker_args(workers: int, beam_args: tuple[str, ...]) -> tuple[str, ...]:
    """`beam_args` with Beam's flag for `workers` local worker processes added (none for 1)."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise InvalidArgumentError(f"--workers must be a positive int, got {workers!r}")
    if workers == 1:
        return tuple(beam_args)
    options = PipelineOptions(list(beam_args))
    name = _runner_name(options)
    if name is not None and name.lower() not in _IN_PROCESS_RUNNERS:
        raise InvalidArgumentError(
            f"--workers {workers} is for the local runner; --runner {name} has its own "
            "worker options (Dataflow: --num_workers, --max_num_workers)"
        )
    direct = options.view_as(DirectOptions)
    if direct.direct_num_workers not in (None, 1) or direct.direct_running_mode != "in_memory":
        raise InvalidArgumentError(
            f"--workers {workers} sets Beam's --direct_num_workers and runs worker processes; "
            "pass --workers or the --direct_* options, not both"
        )
    return (*beam_args, f"--direct_num_workers={workers}")


def _worker_processes(worker_command: str | None) -> beam.runners.PipelineRunner:
    """FnApiRunner with worker processes, as Beam's multi_processing mode starts them, through
    tpufeed's entry point (which keeps Beam's start-up log lines out of the output), or with
    `worker_command` (`WarmWorkers.command`)."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    from tpufeed.beam.workers.worker_process import command

    level = logging.getLogger("tpufeed").getEffectiveLevel()
    return FnApiRunner(
        default_environment=SubprocessSDKEnvironment.from_command_string(
            command_string=worker_command or command(level)
        )
    )


def runner_for(
    options: PipelineOptions, workers: int = 1, worker_command: str | None = None
) -> beam.runners.PipelineRunner | None:
    """The in-process runner (with `workers` worker processes, started by `worker_command`
    where given) unless --runner names another (None: Beam makes that one); refuses runners
    and modes that lose records."""
    name = _runner_name(options)
    key = None if name is None else name.lower()
    short = None if key is None else key.rsplit(".", 1)[-1]
    if short in _REFUSED_RUNNERS:
        raise InvalidArgumentError(
            f"--runner {name}: tpufeed refuses it: {_REFUSED_RUNNERS[short]}"
        )
    if key not in _IN_PROCESS_RUNNERS:
        return None
    direct = options.view_as(DirectOptions)
    mode = direct.direct_running_mode
    if mode == "multi_threading":
        raise InvalidArgumentError(
            f"--direct_running_mode=multi_threading: {_LOSES_RECORDS}; use --workers N "
            "(worker processes) instead"
        )
    if workers > 1:
        return _worker_processes(worker_command)
    if direct.direct_num_workers not in (None, 1) and mode != "multi_processing":
        raise InvalidArgumentError(
            f"--direct_num_workers={direct.direct_num_workers} without --direct_running_mode=multi_processing: "
            f"Beam's in-process runner would run its bundles on threads, and {_LOSES_RECORDS}; "
            "use --workers N (worker processes)"
        )
    return in_process_runner()  # it reads the direct options itself


def _counter_totals(result: Any) -> dict[str, int] | None:
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace("tpufeed"))["counters"]
    except Exception:  # noqa: BLE001 - a runner without metrics raises its own kind
        return None
    totals: dict[str, int] = {}
    for counter in counters:
        value = counter.committed if counter.committed is not None else counter.attempted
        if value is not None:
            name = counter.key.metric.name
            totals[name] = totals.get(name, 0) + value
    return totals


def check_counts(result: Any, manifest: dict[str, Any], output: str, runner: str) -> None:
    """Cross-checks the manifest against the steps' own counters.

    A runner that loses elements between steps would otherwise leave a consistent-looking
    dataset with records missing; and one that reports no counters cannot be checked. Either
    way the build fails before its dataset is switched in, so `output` keeps what it held.
    """
    totals = _counter_totals(result)
    missing = [name for name in COUNTERS if totals is None or name not in totals]
    if totals is None or missing:
        raise TpufeedError(
            f"{output}: the runner {runner} reported no {' or '.join(missing)} counter, so "
            "tpufeed cannot check that no record was lost or repeated; the new dataset was "
            f"not published and {output} is as it was. Build on a runner that reports "
            "metrics (the local runner, Dataflow, Flink, Spark)"
        )
    expected = {
        "records_in": manifest["build"]["records_in"],
        "records_out": manifest["num_records"],
        "records_written": manifest["num_records"],
    }
    wrong = {k: (totals[k], v) for k, v in expected.items() if totals[k] != v}
    if wrong:
        details = ", ".join(
            f"{k}: steps counted {a}, the manifest has {b}" for k, (a, b) in wrong.items()
        )
        raise TpufeedError(
            f"{output}: the runner lost or repeated records ({details}); the new "
            f"dataset was not published and {output} is as it was"
        )
