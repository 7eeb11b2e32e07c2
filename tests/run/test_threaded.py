"""The parent's first batch on several threads while its workers are cold (`run.threaded`):
the same batch as one thread makes, only where every stage before the last says it is
thread-safe, and a failure raised as one thread meets it first."""

import threading
import time

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import TransformError
from tpufeed.ops.base import Chunk, StageClock
from tpufeed.run.chunks import ChunkRunner
from tpufeed.run.walk import walk
from tpufeed.transforms import Normalize, RandomFlip, RandomResizedCrop


def _tagged(e):
    time.sleep(0.001)  # the threads overlap, as a decoder's would
    return {
        "id": np.int64(e),
        "x": np.arange(6, dtype=np.int64) * e,
        "thread": threading.get_ident(),
    }


_tagged.thread_safe = True


def _untagged(e):
    return _tagged(e)


def _jitter(e, rng):
    return {**e, "x": e["x"] + rng.integers(0, 1000, size=6)}


_jitter.thread_safe = True


def _last(e):
    return {**e, "x": e["x"] * 2}


def _first_chunk(ds):
    plan = ds._plan()
    chunk = next(step for step in walk(plan, plan.start()) if isinstance(step, Chunk))
    return ChunkRunner(plan, StageClock()), chunk


def _threads_of(piece):
    return set(piece.payload["thread"].tolist())


def _same(a, b, keys):
    for key in keys:
        assert np.array_equal(a.payload[key], b.payload[key]), key


def test_a_chunk_on_two_threads_is_the_chunk_one_thread_makes():
    ds = (
        tpufeed.Dataset.from_sequence(list(range(100)))
        .shuffle(4)
        .map(_tagged)
        .random_map(_jitter)
        .filter(lambda e: e["id"] % 5 != 2)
        .map(_last)
        .batch(32)
    )
    runner, chunk = _first_chunk(ds)
    assert runner.threadable is False  # the filter's lambda does not say it is thread-safe
    ds = (
        tpufeed.Dataset.from_sequence(list(range(100)))
        .shuffle(4)
        .map(_tagged)
        .random_map(_jitter)
        .map(_last)
        .batch(32)
    )
    runner, chunk = _first_chunk(ds)
    one, two = runner.run_chunk(chunk), runner.run_chunk(chunk, threads=2)
    _same(one, two, ["id", "x"])
    assert len(_threads_of(one)) == 1 and len(_threads_of(two)) == 2
    assert runner.clock.records["random_map(_jitter)"] == 64  # both threads' times counted


def test_a_stage_that_does_not_say_it_is_thread_safe_keeps_one_thread():
    ds = tpufeed.Dataset.from_sequence(list(range(64))).map(_untagged).map(_last).batch(32)
    runner, chunk = _first_chunk(ds)
    assert len(_threads_of(runner.run_chunk(chunk, threads=2))) == 1


def _fails_late(e):
    if e["id"] == 3:  # in the first part: fails in the second stage
        raise ValueError("bad in the second stage")
    return e


_fails_late.thread_safe = True


def _fails_early(e):
    if e == 27:  # in the second part: fails in the first stage
        raise ValueError("bad in the first stage")
    return _tagged(e)


_fails_early.thread_safe = True


def test_a_failure_on_a_thread_is_the_one_a_single_thread_meets_first():
    ds = (
        tpufeed.Dataset.from_sequence(list(range(32)))
        .map(_fails_early)
        .map(_fails_late)
        .map(_last)
        .batch(32)
    )
    runner, chunk = _first_chunk(ds)
    with pytest.raises(TransformError) as one:
        runner.run_chunk(chunk)
    with pytest.raises(TransformError) as two:
        runner.run_chunk(chunk, threads=2)
    assert two.value.record == one.value.record == 27
    assert "bad in the first stage" in str(two.value)


def test_the_image_transforms_say_they_are_thread_safe():
    for fn in (RandomResizedCrop(8), RandomFlip(), Normalize(), tpufeed.codec.decode):
        assert fn.thread_safe is True
