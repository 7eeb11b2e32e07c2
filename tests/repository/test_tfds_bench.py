"""benchmarks/tfds.py at a tiny size: every row reads every record, side by side."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tfds_benchmark_runs_every_row(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    out = tmp_path / "tfds.json"
    cmd = [sys.executable, "-m", "benchmarks.tfds", "--records", "300", "--rounds", "2"]
    proc = subprocess.run(
        [*cmd, "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = ["data_source", "by hand", "from_tfds ar", "from_tfds tfrecord", "tfds.load"]
    assert result["records"] == 300 and list(result["rate"]) == rows == list(result["first_s"])
    assert all(len(rates) == 2 and min(rates) > 0 for rates in result["rate"].values())
    assert "300 records, 2 rounds; median (best)" in proc.stdout
