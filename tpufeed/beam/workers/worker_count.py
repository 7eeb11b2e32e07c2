"""How many local worker processes a build runs: `--workers N`, or `auto` (the default).

A worker process costs its start (importing Beam and tpufeed: ~1.5 s of CPU on the machine
the build runs on) and the runner's traffic with it; it wins back time only with enough input
to read in parallel. `auto` therefore runs one worker (no worker process: the runner's own)
below `BYTES_PER_WORKER` of input per worker, and otherwise one per CPU this process may use,
at most one per block (a block is what one worker reads at a time). Several workers read
blocks small enough for `BLOCKS_PER_WORKER` each (`spread_block_bytes`). Other runners than the
local one (Dataflow, Flink, Spark) size their own workers: `auto` means 1 local worker there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tpufeed.beam.read.block_plan import Block
from tpufeed.beam.write.shard_size import input_bytes
from tpufeed.errors import InvalidArgumentError

__all__ = [
    "AUTO",
    "BYTES_PER_WORKER",
    "check_workers_setting",
    "choose_workers",
    "local_runner",
    "spread_block_bytes",
]

AUTO = "auto"
# With several workers, blocks are cut small enough for this many a worker (the last one a
# worker reads then leaves the others idle a short while), but not below the least size.
BLOCKS_PER_WORKER = 4
LEAST_BLOCK_BYTES = 8 << 20
# Input a worker process must have to read before a second one pays for its start. Measured
# with benchmarks/build.py on 2 cores (records of ~600 bytes, 2 workers against 1, median of 3
# rounds): 50k records (30 MB) 0.86x, 100k (61 MB) 1.00x, 200k (121 MB) 1.2x. So 2 workers
# from 96 MB, where they are faster, and 1 below, where they are not.
BYTES_PER_WORKER = 48 << 20


def check_workers_setting(workers: object) -> None:
    """Refuses what is neither a positive int nor "auto"."""
    if workers == AUTO:
        return
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise InvalidArgumentError(f"--workers must be a positive int or 'auto', got {workers!r}")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_RUNNER_OPTIONS = ("--runner", "--direct_num_workers", "--direct_running_mode")


def local_runner(beam_args: Sequence[str]) -> bool:
    """Whether `beam_args` leave the build on the local runner, with no worker options of
    Beam's own. Beam parses them where they name one (only then is Beam imported here)."""
    if not any(arg.split("=", 1)[0] in _RUNNER_OPTIONS for arg in beam_args):
        return True
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        StandardOptions,
    )

    options = PipelineOptions(list(beam_args))
    if options.view_as(StandardOptions).runner is not None:
        return False
    direct = options.view_as(DirectOptions)
    return direct.direct_num_workers in (None, 1) and direct.direct_running_mode == "in_memory"


def choose_workers(workers: int | str, blocks: Sequence[Block], beam_args: Sequence[str]) -> int:
    """`workers`, or for "auto" the count that the inputs' size and this machine pay for."""
    if workers != AUTO:
        return int(workers)
    if not local_runner(beam_args):
        return 1
    by_size = input_bytes(list(blocks)) // BYTES_PER_WORKER
    return max(1, min(_cpus(), len(blocks), by_size))


def spread_block_bytes(total: int, workers: int, block_bytes: int) -> int:
    """The block size for `workers`: `block_bytes`, or less where the input would make fewer
    than `BLOCKS_PER_WORKER` blocks a worker (at 2 workers, 121 MB of input in two blocks of
    64 MB left one worker idle for a fifth of the reading)."""
    if workers <= 1:
        return block_bytes
    even = -(-total // (workers * BLOCKS_PER_WORKER))
    return max(min(block_bytes, LEAST_BLOCK_BYTES), min(block_bytes, even))
