"""`tpufeed.trace(path)`: a block's timeline written to a file, an error in the block
included; its arguments checked; recorders that overlap share one timeline."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

import tpufeed
from tests.observe.trace_events import read_trace
from tpufeed.observe import timeline
from tpufeed.observe.trace_file import TraceFile


@pytest.fixture(autouse=True)
def nothing_records():
    timeline.stop()
    yield
    assert timeline.recording() is None, "a test left a timeline recording"


def _names(path) -> list[str]:
    return [e["name"] for e in read_trace(path)["traceEvents"] if e["ph"] != "M"]


def test_the_file_is_written_when_the_block_raises(tmp_path):
    ds = tpufeed.Dataset.from_sequence(range(8)).batch(2)
    with pytest.raises(RuntimeError, match="step failed"), tpufeed.trace(tmp_path / "t.json"):
        for _ in ds:
            raise RuntimeError("step failed")
    assert _names(tmp_path / "t.json").count("next") == 1
    assert timeline.recording() is None


def test_trace_yields_the_timeline_it_records(tmp_path):
    with tpufeed.trace(tmp_path / "t.json") as recorded:
        assert timeline.recording() is recorded
        timeline.instant("mine")
    assert _names(tmp_path / "t.json") == ["mine"]


@pytest.mark.parametrize("path", [None, 3, b"bytes.json", ""])
def test_a_path_that_is_not_one_is_named(tmp_path, path):
    with pytest.raises(tpufeed.InvalidArgumentError, match=f"got {path!r}"):
        with tpufeed.trace(path):
            pass


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True])
def test_a_capacity_that_keeps_nothing_is_named(tmp_path, capacity):
    with pytest.raises(tpufeed.InvalidArgumentError, match=f"got {capacity!r}"):
        TraceFile(tmp_path / "t.json", capacity)


def test_overlapping_recorders_share_one_timeline(tmp_path):
    with tpufeed.trace(tmp_path / "outer.json"):
        timeline.instant("before")
        with tpufeed.trace(tmp_path / "inner.json", capacity=1):  # joins: the outer's capacity
            timeline.instant("inside")
        timeline.instant("after")  # the outer still records
    assert _names(tmp_path / "inner.json") == ["before", "inside"]
    assert _names(tmp_path / "outer.json") == ["before", "inside", "after"]


def test_an_iterator_traced_inside_a_block_shares_its_timeline(tmp_path):
    ds = tpufeed.Dataset.from_sequence(range(6)).batch(3).options(trace=tmp_path / "it.json")
    with tpufeed.trace(tmp_path / "all.json"):
        timeline.instant("before")
        assert sum(1 for _ in ds) == 2
        assert timeline.recording() is not None  # the iterator left; the block records on
    assert _names(tmp_path / "it.json")[0] == "before"
    assert _names(tmp_path / "it.json").count("next") == 3
    assert _names(tmp_path / "all.json") == _names(tmp_path / "it.json")


def test_a_path_that_cannot_be_written_fails_before_the_run(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(tpufeed.InvalidArgumentError, match="cannot make the folder"):
        with tpufeed.trace(tmp_path / "a-file" / "run.json"):
            raise AssertionError("the block must not run")
    with pytest.raises(tpufeed.InvalidArgumentError, match="is a folder"):
        tpufeed.trace(tmp_path).__enter__()
    assert timeline.recording() is None  # nothing was left recording
    ds = tpufeed.Dataset.from_sequence(range(4)).options(trace=tmp_path / "a-file" / "it.json")
    with pytest.raises(tpufeed.InvalidArgumentError, match="cannot make the folder"):
        ds.iterator()
    assert timeline.recording() is None


def test_the_folder_of_a_trace_file_is_made(tmp_path):
    with tpufeed.trace(tmp_path / "new" / "deeper" / "run.json"):
        timeline.instant("mine")
    assert _names(tmp_path / "new" / "deeper" / "run.json") == ["mine"]


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled to the last byte by one file, `filler` (mounting needs root)."""
    path = tmp_path / "full"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.fail(f"a full disk needs a small tmpfs, and it could not be mounted: {mounted}")
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:  # until not one more byte fits
                os.write(fd, b"x" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
        finally:
            os.close(fd)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _trace_lost(path):
    return pytest.warns(UserWarning, match=f"trace file {path} could not be written .No space")


def test_a_trace_that_cannot_be_written_warns_after_a_whole_run_and_leaves_nothing(full_disk):
    path = full_disk / "it.json"
    ds = tpufeed.Dataset.from_sequence(range(40)).batch(4).options(trace=path)
    with _trace_lost(path):
        batches = [list(b) for b in ds]
    assert [x for b in batches for x in b] == list(range(40))
    with _trace_lost(full_disk / "block.json"):
        with tpufeed.trace(full_disk / "block.json"):
            assert len(list(ds.options(trace=None))) == 10
    assert os.listdir(full_disk) == ["filler"]  # no trace, no staging file


def test_a_trace_that_cannot_be_written_never_hides_the_blocks_own_error(full_disk):
    with _trace_lost(full_disk / "t.json"), pytest.raises(RuntimeError, match="step failed"):
        with tpufeed.trace(full_disk / "t.json"):
            for _ in tpufeed.Dataset.from_sequence(range(8)).batch(2):
                raise RuntimeError("step failed")
    assert os.listdir(full_disk) == ["filler"]
