"""`tpufeed bench`: runs a pipeline, names the bottleneck, suggests a fix, prints JSON and plots."""

import json
import subprocess
import sys
import textwrap

import pytest

TARGET = textwrap.dedent("""
    import time, numpy as np, tpufeed

    def slow(e):
        time.sleep(0.0005)
        return e

    def make_dataset():
        return (tpufeed.Dataset.from_sequence(list(range(10**6)))
                .map(lambda i: np.full(16, i)).map(slow).batch(16).repeat())
""")


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "pipeline.py"
    path.write_text(TARGET)
    return f"{path}:make_dataset"


def bench(*args):
    return subprocess.run([sys.executable, "-m", "tpufeed.cli", "bench", *args],
                          capture_output=True, text=True, timeout=120)


def test_json_output_names_the_slow_stage_and_suggests_workers(target, tmp_path):
    plot = tmp_path / "bench.png"
    result = bench(target, "--seconds", "1.5", "--step-time", "0.001", "--json", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"stats", "verdict"}
    stats, verdict = data["stats"], data["verdict"]
    for key in ("wall_seconds", "wait_fraction", "batches", "records", "records_per_s", "workers",
                "prefetch", "queue_depth", "memory_bytes", "errors", "bottleneck", "stages"):
        assert key in stats
    for stage in stats["stages"].values():
        assert set(stage) == {"seconds", "records", "parallelism", "records_per_s"}
    assert stats["bottleneck"] == "map(slow)"
    assert verdict["input_bound"] is True
    assert ".workers(" in verdict["suggestion"] and "map(slow)" in verdict["suggestion"]
    assert plot.stat().st_size > 10_000


def test_text_output_gives_a_verdict(target):
    result = bench(target, "--batches", "20", "--step-time", "0.05")
    assert result.returncode == 0, result.stderr
    assert "<- bottleneck" in result.stdout
    # The pipeline alone outruns a 50 ms step, but without prefetch the two take turns.
    assert "input-bound" in result.stdout and ".prefetch(2) (now 0)" in result.stdout


def test_a_bad_target_is_a_clear_error(tmp_path):
    result = bench(f"{tmp_path}/nothing.py:make")
    assert result.returncode == 2 and "no such file" in result.stderr
