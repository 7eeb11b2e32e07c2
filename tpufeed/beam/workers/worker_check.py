"""Before a build on a portable runner, one element through its workers, with a bounded wait.

A portable runner (PortableRunner, FlinkRunner, SparkRunner) runs the build's steps in SDK
workers that share nothing with the launcher but the pipeline: a Docker image, a process, or
an EXTERNAL worker pool. Workers whose Python lacks tpufeed fail on the first step after the
job has started; workers that cannot start at all (no apache_beam in that Python, a pool that
is not listening) leave the runner waiting for them with no end: Beam 2.77's job service never
gives up. So the build first runs a one-element check job with the same options, in a child
process it can stop, and fails with one line naming the cause when the workers cannot import
tpufeed, run another version of it, report no counters, or do not answer within the timeout.
LOOPBACK workers are the launcher's own process, which needs no check.

    python -m tpufeed.beam.workers.worker_check TIMEOUT_S BEAM_ARGS...   # prints one JSON line
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence

from tpufeed.errors import TpufeedError

__all__ = ["DEFAULT_TIMEOUT_S", "check_workers", "needs_check"]

DEFAULT_TIMEOUT_S = 300.0
_PORTABLE = {"portablerunner", "flinkrunner", "sparkrunner"}
_COUNTER = "workers_checked"
_MISSING = re.compile(r"(ModuleNotFoundError|ImportError): (.*)")


def needs_check(beam_args: Sequence[str]) -> bool:
    """Whether `beam_args` name a portable runner whose workers are not the launcher's process."""
    from apache_beam.options.pipeline_options import (
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )

    options = PipelineOptions(list(beam_args))
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__ if runner else ""
    environment = options.view_as(PortableOptions).environment_type or "DOCKER"
    return name.lower().rsplit(".", 1)[-1] in _PORTABLE and environment.upper() != "LOOPBACK"


def _describe(beam_args: Sequence[str]) -> str:
    """The runner and where its workers come from, as the user wrote them."""
    from apache_beam.options.pipeline_options import (
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )

    options = PipelineOptions(list(beam_args))
    portable = options.view_as(PortableOptions)
    where = portable.environment_type or "DOCKER"
    if portable.environment_config:
        where += f" {portable.environment_config}"
    return f"--runner {options.view_as(StandardOptions).runner} (--environment_type {where})"


def check_workers(beam_args: Sequence[str], timeout_s: float) -> None:
    """Runs the check job; raises TpufeedError naming the cause when the workers cannot run
    the build. The child process is killed if even cancelling its job does not end it."""
    what = _describe(beam_args)
    command = [
        sys.executable,
        "-m",
        "tpufeed.beam.workers.worker_check",
        str(timeout_s),
        *beam_args,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 30)
    except subprocess.TimeoutExpired:
        report: dict[str, str] = {"timeout": f"{timeout_s:g}"}
    else:
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        report = json.loads(lines[-1]) if lines else {"error": tail[0]}
    if "ok" in report:
        return
    raise TpufeedError(f"the workers of {what} cannot run the build: {_cause(report)}")


def _cause(report: dict[str, str]) -> str:
    from tpufeed import __version__

    if "timeout" in report:
        return (
            f"the check job did not finish within {report['timeout']} s "
            "(--worker-start-timeout). A worker whose Python lacks apache_beam dies before "
            "it connects, and the runner waits for it with no end; read the log of the "
            "worker pool, the job server or the container, and check that the job server "
            f"is reachable and the workers' Python has apache_beam and tpufeed=={__version__}"
        )
    if "missing" in report:
        return (
            f"their Python cannot import what the build needs ({report['missing']}); install "
            f"tpufeed=={__version__} there (the worker pool's Python, or the SDK container "
            "image: --environment_config, --sdk_container_image)"
        )
    if "no_counters" in report:
        return (
            "the runner reported no counters, so tpufeed could not check the build's record "
            "counts; use a runner that reports metrics"
        )
    return report["error"]


def _check_version(element: int, launcher: str) -> int:
    """In a worker: fails the job when its tpufeed is not the launcher's."""
    from apache_beam.metrics import Metrics

    from tpufeed import __version__

    if __version__ != launcher:
        raise TpufeedError(
            f"the workers run tpufeed {__version__}, the launcher {launcher}: install "
            f"tpufeed=={launcher} in the workers' environment"
        )
    Metrics.counter("tpufeed", _COUNTER).inc()
    return element


def _report(error: BaseException) -> dict[str, str]:
    text = str(error)
    found = _MISSING.findall(text)
    if found:
        return {"missing": found[-1][1].strip()}
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return {"error": lines[-1] if lines else type(error).__name__}


def _run_check(timeout_s: float, beam_args: list[str]) -> dict[str, str]:
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.runner import PipelineState

    from tpufeed import __version__

    pipeline = beam.Pipeline(options=PipelineOptions(list(beam_args)))
    _ = pipeline | beam.Create([0]) | beam.Map(_check_version, __version__)
    try:
        result = pipeline.run()
        state = result.wait_until_finish(duration=int(timeout_s * 1000))
    except Exception as e:  # noqa: BLE001 - a failed job is reported, whatever raised it
        return _report(e)
    if state != PipelineState.DONE:
        result.cancel()
        return {"timeout": f"{timeout_s:g}"}
    query = MetricsFilter().with_namespace("tpufeed").with_name(_COUNTER)
    try:
        counted = result.metrics().query(query)["counters"]
    except Exception:  # noqa: BLE001 - a runner without metrics raises its own kind
        counted = []
    if not any((c.committed or c.attempted) for c in counted):
        return {"no_counters": "1"}
    return {"ok": __version__}


def main(argv: list[str]) -> None:
    report = _run_check(float(argv[1]), argv[2:])
    print(json.dumps(report), flush=True)
    # A job service embedded in this process (--job_endpoint embed) keeps a thread waiting
    # for workers that never came, which would hold the process open: leave without it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
