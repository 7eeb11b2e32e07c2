"""Smoke test of benchmarks/restore.py (what `it.start()` hides behind a restore): it runs at a
tiny size, in and out of workers, and reports every figure."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_restore_benchmark_reports_each_worker_count():
    cmd = [sys.executable, "-m", "benchmarks.restore", "--workers", "0", "2", "--records", "96"]
    cmd += ["--batch", "8", "--cost-ms", "0.5", "--rounds", "1", "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["schema"] == "restore/1"
    assert [row["workers"] for row in result["rows"]] == [0, 2]
    for row in result["rows"]:
        assert row["first_batch_s"] > 0 and row["restore_s"] == row["first_batch_s"]
        assert row["restore_then_next_s"] > 0 and row["start_restore_next_s"] > 0
