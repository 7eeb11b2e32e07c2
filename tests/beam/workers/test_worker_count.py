"""`--workers auto`: one worker for small inputs, one per CPU (at most one per block) for
large ones, and 1 on runners that size their own workers."""

from __future__ import annotations

import os

import pytest

from tpufeed.beam.read.block_plan import Block
from tpufeed.beam.workers.worker_count import (
    AUTO,
    BYTES_PER_WORKER,
    check_workers_setting,
    choose_workers,
    spread_block_bytes,
)
from tpufeed.errors import InvalidArgumentError


def _blocks(count: int, size: int) -> list[Block]:
    return [
        Block(
            id=i,
            file_index=0,
            kind="jsonl",
            path="in.jsonl",
            start=i,
            end=i + 1,
            single=False,
            size=size,
        )
        for i in range(count)
    ]


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def test_auto_runs_one_worker_below_the_size_that_pays():
    assert choose_workers(AUTO, _blocks(4, BYTES_PER_WORKER // 8), ()) == 1
    assert choose_workers(AUTO, _blocks(1, BYTES_PER_WORKER * 8), ()) == 1  # one block
    assert choose_workers(AUTO, [], ()) == 1


def test_auto_runs_one_worker_per_cpu_on_large_inputs():
    blocks = _blocks(64, BYTES_PER_WORKER)
    assert choose_workers(AUTO, blocks, ()) == min(_cpus(), 64)
    two = _blocks(4, BYTES_PER_WORKER // 2)  # two workers' worth of input
    assert choose_workers(AUTO, two, ()) == min(_cpus(), 2)


def test_auto_is_one_local_worker_on_other_runners():
    blocks = _blocks(64, BYTES_PER_WORKER)
    assert choose_workers(AUTO, blocks, ("--runner", "DataflowRunner")) == 1
    assert choose_workers(AUTO, blocks, ("--direct_num_workers=3",)) == 1


def test_a_count_is_taken_as_given():
    assert choose_workers(3, _blocks(1, 10), ()) == 3


@pytest.mark.parametrize("bad", [0, -1, "two", 1.5, True, None])
def test_settings_that_are_neither_a_count_nor_auto_are_refused(bad):
    with pytest.raises(InvalidArgumentError, match="--workers must be a positive int or 'auto'"):
        check_workers_setting(bad)


def test_several_workers_get_a_few_blocks_each():
    mb = 1 << 20
    assert spread_block_bytes(121 * mb, 1, 64 * mb) == 64 * mb  # one worker: as asked
    assert spread_block_bytes(121 * mb, 2, 64 * mb) == -(-121 * mb // 8)  # 8 blocks of ~15 MB
    assert spread_block_bytes(10 * mb, 2, 64 * mb) == 8 * mb  # never below 8 MB
    assert spread_block_bytes(10 * mb, 2, 2 * mb) == 2 * mb  # nor above what was asked
    assert spread_block_bytes(10_000 * mb, 2, 64 * mb) == 64 * mb
