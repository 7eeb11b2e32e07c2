"""The plan of a `tpufeed build`, made before Beam is imported (for local inputs): the inputs'
blocks, the shard count and the local worker processes, with every check that can fail before
any work.

>>> plan = plan_build(BuildConfig(inputs=("raw/*.jsonl",), output="ds"))  # doctest: +SKIP
>>> plan.workers, plan.num_shards, len(plan.blocks)  # doctest: +SKIP
(2, 8, 8)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tpufeed.beam.plan.build_config import BuildConfig
from tpufeed.beam.read.block_plan import Block, plan_blocks
from tpufeed.beam.read.inputs import expand_inputs
from tpufeed.beam.read.user_transforms import load_transform
from tpufeed.beam.workers.worker_count import choose_workers, local_runner, spread_block_bytes
from tpufeed.beam.write import shard_files
from tpufeed.beam.write.publish import leftover_builds
from tpufeed.beam.write.shard_size import check_shard_size, input_bytes, suggest_num_shards
from tpufeed.errors import plural

__all__ = ["BuildPlan", "plan_build"]

log = logging.getLogger("tpufeed.build")


@dataclass(frozen=True)
class BuildPlan:
    """What a build reads and writes: its blocks, shards, and local worker processes (`local`:
    the build runs on the local runner, whose worker processes tpufeed starts)."""

    blocks: list[Block]
    num_shards: int
    workers: int
    local: bool


def plan_build(config: BuildConfig) -> BuildPlan:
    """The inputs' blocks, the shard count and the local workers, with every check that can
    fail before any work: the inputs, the transforms' names, the shards' size and the output
    folder. Several workers get blocks small enough for a few each (`spread_block_bytes`)."""
    files = expand_inputs(config.inputs)
    for spec in config.transforms:  # fail here, before any work, on a bad name
        load_transform(spec)
    blocks = plan_blocks(files, config.block_bytes)
    size = input_bytes(blocks)
    workers = choose_workers(config.workers, blocks, config.beam_args)
    block_bytes = spread_block_bytes(size, workers, config.block_bytes)
    if block_bytes < config.block_bytes:
        blocks = plan_blocks(files, block_bytes)
    num_shards = config.num_shards or suggest_num_shards(size)
    check_shard_size(size, num_shards, config.max_shard_bytes, config.output)
    shard_files.check_output(
        config.output, num_shards, config.file_format, overwrite=config.overwrite
    )
    for folder in leftover_builds(config.output):
        log.warning(
            "%s holds what a killed build into %s left (not a dataset); delete it",
            folder,
            config.output,
        )
    log.info(
        "building %s from %s into %s",
        config.output,
        plural(len(files), "input file"),
        plural(num_shards, f"{config.file_format} shard"),
    )
    log.info(
        "reading %s in %s of up to %s bytes",
        plural(len(files), "input file"),
        plural(len(blocks), "block"),
        f"{block_bytes:,}",
    )
    return BuildPlan(blocks, num_shards, workers, local_runner(config.beam_args))
