"""`build`: the `tpufeed build` pipeline, from raw inputs to shards (see `build_pipeline`).

It plans the build before this process imports Beam (for local inputs, which need no Beam
file system to list), and starts the local worker processes of a build with several
(`warm_workers`) before that import too: their imports of Beam's harness (about a second
each) then run beside this process's own, not after it.

>>> build(BuildConfig(inputs=("raw/*.jsonl",), output="ds", num_shards=4))  # doctest: +SKIP
{'records_in': 1000, 'records_out': 1000, 'skipped': 0, 'filtered': 0, 'shards': 4, ...}
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from tpufeed.beam.beam_import import import_with_beam
from tpufeed.beam.plan.build_config import BuildConfig
from tpufeed.beam.plan.build_plan import plan_build
from tpufeed.beam.workers.warm_workers import WarmWorkers

__all__ = ["BuildConfig", "build"]


def _remote_options(config: BuildConfig) -> None:
    """Beam's file systems take the build's options (s3:// reads its endpoint and keys
    there) before the plan lists remote inputs."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(config.beam_args)))


def build(config: BuildConfig) -> dict[str, Any]:
    """Runs the build and returns its summary (records in/out, skipped, shards, bytes, seconds).

    The dataset already in `config.output` stays whole until the new one is complete and its
    counts are checked; then one switch replaces it (`tpufeed.beam.write.publish`). A build that
    fails or is stopped (Ctrl-C raises KeyboardInterrupt) removes what it wrote and leaves the
    output as it was, and ends every worker process it started.
    """
    start = time.monotonic()
    if any("://" in path for path in (*config.inputs, config.output)):
        _remote_options(config)
    plan = plan_build(config)
    with contextlib.ExitStack() as stack:
        command = None
        if plan.local and plan.workers > 1:
            level = logging.getLogger("tpufeed").getEffectiveLevel()
            command = stack.enter_context(WarmWorkers(plan.workers, level)).command()
        pipeline = import_with_beam("tpufeed.beam.build_pipeline")
        summary = pipeline.run_build(config, plan, command)
    return {**summary, "seconds": time.monotonic() - start}
