"""`tpufeed quickstart` (issue 5 item 5): builds the digits, trains with JAX, checks itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 8])
def test_quickstart_trains_on_the_local_devices_and_checks_itself(tmp_path, devices):
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
    }
    out_dir = tmp_path / "qs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpufeed.cli",
            "quickstart",
            "--output",
            str(out_dir),
            "--epochs",
            "3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "1536 training records: scikit-learn digits" in out
    assert "every record exactly once per epoch: True" in out
    assert "continues exactly: True" in out
    assert re.search(r"throughput\s+[\d,]+ records/s", out)
    wait = float(re.search(r"input wait\s+([\d.]+)%", out).group(1))
    assert 0.0 <= wait <= 100.0
    assert "spent waiting for the next batch; high = input-bound" in out
    assert float(re.search(r"test accuracy\s+([\d.]+)", out).group(1)) > 0.5
    assert "training on" in proc.stderr  # the progress bar
    assert len(list(out_dir.glob("*.array_record"))) == 4


@pytest.mark.slow
def test_one_epoch_checks_resume_within_it(tmp_path):
    """Found by the CLI fuzz (tests/faults): with --epochs 1 the state was to be taken in epoch
    1, which never came, and the quickstart reported a resume failure and exited 1."""
    proc = subprocess.run(
        [sys.executable, "-m", "tpufeed.cli", "quickstart", "--output", str(tmp_path / "qs")]
        + ["--epochs", "1"],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "mid-epoch state continues exactly: True" in proc.stdout


def test_the_input_wait_line_says_what_it_means(capsys):
    """ "input wait 84.8%" alone left the reader to guess what it measures."""
    from tpufeed.cli.quickstart import print_result

    print_result(
        {
            "dataset": "qs", "shards": 4, "train_records": 1536, "epochs": 3,
            "exactly_once_every_epoch": True, "resume_matches": True, "records_per_s": 900.0,
            "devices": 1, "input_wait_fraction": 0.848, "test_accuracy": 0.9, "seconds": 5.0,
        }
    )  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    wait = next(i for i, line in enumerate(lines) if line.startswith("input wait"))
    assert lines[wait] == "input wait     84.8% of the loop's time"
    assert "share of the training loop's time spent waiting for the next batch" in lines[wait + 1]
    assert "high = input-bound" in lines[wait + 1]
