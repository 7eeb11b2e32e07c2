"""Smoke test of benchmarks/compare.py: every row runs at a tiny size and lands in the JSON.

The numbers at this size mean nothing; the test checks that each system's pipeline builds,
yields batches of the workload's shape and dtype (measure.py checks the first batch), and covers
every record of every epoch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("workload", ["W1", "W2"])
def test_compare_runs_every_row(tmp_path, workload):
    out = tmp_path / "out.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "compare.py"), "--workload", workload,
           "--records", "600", "--passes", "1", "--workers", "2", "--json", str(out),
           "--data-dir", str(tmp_path / "data"), "--timeout", "120"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())

    import tpufeed
    parallel_tpufeed = hasattr(tpufeed.Dataset, "workers")
    assert list(report["workloads"]) == [workload]
    rows = report["workloads"][workload]["rows"]
    seen = {(r["system"], r["workers"]) for r in rows}
    for system in ("grain-map", "grain-loader", "tfdata", "tfdata-ops", "torch"):
        assert {(system, 0), (system, 2)} <= seen, (system, seen)
    assert {("raw-reader", 0), ("bare-loop", 0), ("tpufeed", 0)} <= seen
    assert (("tpufeed", 2) in seen) == parallel_tpufeed
    for row in rows:
        assert "error" not in row, row
        assert len(row["rates"]) == 1 and row["rate"] > 0 and row["first_batch_s"] > 0
        assert row["rss_main_mib"] > 0
    assert report["workloads"][workload]["summary"]["bare_loop"] > 0
    assert "| bare-loop | limit |" in proc.stdout
    assert ("CPU limit (bare x" in proc.stdout) == (workload == "W2")
