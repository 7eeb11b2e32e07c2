"""benchmarks/scaling.py (parent and worker CPU per record, the Amdahl projection) and
compare.py's early-window rate and worker-count rows, at a tiny size: the numbers mean nothing
here, the arithmetic and the plumbing do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def test_projection_is_amdahl_with_the_parent_as_the_serial_part():
    from benchmarks.scaling import project, summarise

    assert project(0.5, 9.5, 8) == pytest.approx(8 / 10e-6)  # CPU-bound: C / (p + w)
    assert project(0.5, 9.5, 240) == pytest.approx(2e6)  # parent-bound: 1 / p
    runs = [
        {
            "workload": "W1",
            "workers": k,
            "rate": r,
            "p_us": p,
            "w_us": w,
            "parent_us_per_batch": p * 256,
            "load": 0.5,
        }
        for k, r, p, w in [
            (0, 100e3, 10.0, 10.0),
            (1, 110e3, 4.0, 9.0),
            (2, 190e3, 0.5, 10.0),
            (1, 90e3, 6.0, 11.0),
            (2, 170e3, 0.5, 10.0),
        ]
    ]
    out = summarise(runs, 2)["workloads"]["W1"]
    # p is the N-worker parent's; with 1 worker the parent also ran chunks (5 µs of the
    # medians' 5 + 10), so that run's record work is 5 + 10 - 0.5
    assert out["p_us"] == 0.5 and out["w1_us"] == 14.5 and out["wn_us"] == 10.0
    assert out["predicted_nw"] == pytest.approx(min(2 / 15.0, 1 / 0.5, 2 / 14.5) * 1e6)
    assert out["ceiling"] == pytest.approx(2e6)
    assert out["projection"][240] == (pytest.approx(2e6), pytest.approx(2e6))
    assert out["stops_at_cores"] == pytest.approx(30)  # (p + w) / p: 15 / 0.5
    assert set(out["projection"]) == {8, 32, 96, 180, 240}


@pytest.mark.slow
@pytest.mark.multiprocess
def test_scaling_measures_every_worker_count(tmp_path):
    out = tmp_path / "scaling.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.scaling",
        "--workloads",
        "W1",
        "--records",
        "3000",
        "--passes",
        "1",
        "--workers",
        "2",
        "--json",
        str(out),
        "--data-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert sorted(r["workers"] for r in report["runs"]) == [0, 1, 2]
    for run in report["runs"]:
        assert run["records"] > 0 and run["p_us"] > 0 and run["w_us"] > 0, run
    assert "| W1 |" in proc.stdout and "240 cores" in proc.stdout


@pytest.mark.slow
@pytest.mark.multiprocess
def test_compare_reports_the_early_window_for_each_worker_count(tmp_path):
    out = tmp_path / "out.json"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "benchmarks", "compare.py"),
        "--workload",
        "W1",
        "--records",
        "800",
        "--passes",
        "1",
        "--systems",
        "tpufeed",
        "--tpufeed-workers",
        "0,1,2",
        "--json",
        str(out),
        "--data-dir",
        str(tmp_path / "data"),
        "--timeout",
        "120",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["workloads"]["W1"]["rows"]
    assert [r["workers"] for r in rows] == [0, 1, 2]
    assert all(r["rate_early"] > 0 for r in rows)
    targets = {t["target"] for t in json.loads(out.read_text())["workloads"]["W1"]["targets"]}
    assert {"tpufeed 1w >= tpufeed 0w, early", "tpufeed 2w >= tpufeed 0w"} <= targets


@pytest.mark.slow
@pytest.mark.multiprocess
def test_parent_cost_breaks_next_down_by_step(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.parent_cost",
        "--workers",
        "1",
        "--batches",
        "30",
        "--step-ms",
        "1",
        "--records",
        "3000",
        "--data-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("W1, ")) :]
    assert "next()" in lines[0] and "µs a record" in lines[0]
    spent = {
        line.split(":")[0].strip(): float(line.rsplit(":", 1)[1].split()[0]) for line in lines[1:]
    }
    assert spent["deal"] > 0 and spent["receive_any"] > 0 and spent["_received"] > 0, spent
