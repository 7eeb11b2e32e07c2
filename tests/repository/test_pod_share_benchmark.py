"""benchmarks/pod_share.py, what sharing the pod's summary costs, runs as the report says
(issue 46 item 1)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_pod_share_runs_both_rows_and_only_the_on_row_shares(tmp_path):
    """benchmarks/pod_share.py at a tiny size: host 0 of a real two-host torch.distributed run,
    sharing off then on; process 0 read both hosts' summaries in the "on" row only."""
    pytest.importorskip("torch")
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.pod_share", "--rounds", "1", "--passes", "1"]
        + ["--records", "20000", "--interval", "0.1", "--data-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| off | " in result.stdout and "| on, every 0.1 s | " in result.stdout
    assert "on / off: " in result.stdout
    assert "read at the end of each row: {'off': [()], 'on': [(0, 1)]}" in result.stdout
    assert "the sharing thread's CPU: " in result.stdout
