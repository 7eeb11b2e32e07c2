"""`tpufeed.cli.bench_plot`: records per 0.1 s per process from a timeline's stage spans, and
the --trace / --plot files checked before the run."""

import os

import pytest

from tpufeed.cli.bench_plot import (
    check_writable,
    output_stage,
    plot,
    records_per_bin,
    write_trace,
)
from tpufeed.errors import InvalidArgumentError
from tpufeed.observe.timeline import Timeline
from tpufeed.run.stats import PipelineStats, StageStats


def stats(*names):
    return PipelineStats(
        wall_seconds=1.0, wait_seconds=0.0, batches=4, records=64, workers=2, prefetch=2,
        queue_depth=0, memory_bytes=0, dropped_records=0, errors=0,
        stages={n: StageStats(0.1, 64, 2) for n in names},
    )  # fmt: skip


def span(timeline, name, end_s, records, pid, category="stage"):
    duration = 10_000_000  # 10 ms
    end = timeline.started_ns + int(end_s * 1e9)
    timeline.add((name, category, end - duration, duration, pid, "main", {"records": records}))


def test_records_are_binned_per_process_where_their_spans_end():
    timeline = Timeline()
    span(timeline, "batch", 0.05, 16, pid=1)
    span(timeline, "batch", 0.08, 16, pid=1)
    span(timeline, "batch", 0.25, 32, pid=2)
    span(timeline, "read", 0.05, 99, pid=1)  # another stage: not counted
    span(timeline, "batch", 0.15, 99, pid=1, category="span")  # not a stage span
    assert records_per_bin(timeline, "batch") == {1: [32, 0, 0], 2: [0, 0, 32]}
    assert records_per_bin(Timeline(), "batch") == {}


def test_the_output_stage_is_batch_or_the_last_one_not_the_transfer():
    assert output_stage(stats("read", "map(f)", "batch", "transfer")) == "batch"
    assert output_stage(stats("read", "pack", "transfer")) == "pack"
    assert output_stage(stats("transfer")) is None


def test_a_trace_path_that_cannot_be_written_is_named(tmp_path):
    with pytest.raises(InvalidArgumentError, match="--trace .* its folder .* does not exist"):
        check_writable(str(tmp_path / "missing" / "t.json"), "--trace", "json")
    with pytest.raises(InvalidArgumentError, match=r"it is a folder; .*bench\.json"):
        check_writable(str(tmp_path), "--trace", "json")
    with pytest.raises(InvalidArgumentError, match="--trace needs a file name, e.g. --trace b"):
        check_writable("", "--trace", "json")
    if os.path.isdir("/proc/self"):  # a folder where no file can be made: not "missing"
        with pytest.raises(InvalidArgumentError) as e:
            check_writable("/proc/t.json", "--trace", "json")
        assert "does not exist" not in str(e.value) and "writable folder" in str(e.value)
    check_writable(str(tmp_path / "t.json"), "--trace", "json")
    assert os.listdir(tmp_path) == []  # checked, not left behind
    timeline = Timeline()
    span(timeline, "batch", 0.05, 16, pid=os.getpid())
    write_trace(timeline, str(tmp_path / "t.json"))
    assert b'"name":"batch"' in (tmp_path / "t.json").read_bytes()


def test_the_plot_draws_the_processes_panel(tmp_path):
    pytest.importorskip("matplotlib")
    timeline = Timeline()
    for k in range(20):
        span(timeline, "batch", 0.05 * k, 16, pid=1 + k % 2)
    samples = [(0.05 * k, 16 * k) for k in range(1, 21)]
    plot(str(tmp_path / "p.png"), stats("read", "batch"), samples, timeline)
    plot(str(tmp_path / "without.png"), stats("read", "batch"), samples, None)
    assert (tmp_path / "p.png").stat().st_size > (tmp_path / "without.png").stat().st_size
