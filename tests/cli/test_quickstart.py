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


def test_the_result_says_where_to_go_next(capsys):
    """Issue 47: the quickstart ended on its total, with nothing said of what to do next."""
    from tpufeed.cli.quickstart import print_result

    print_result(
        {
            "dataset": "qs", "shards": 4, "train_records": 1536, "epochs": 3,
            "exactly_once_every_epoch": True, "resume_matches": True, "records_per_s": 900.0,
            "devices": 1, "input_wait_fraction": 0.5, "test_accuracy": 0.9, "seconds": 5.0,
        }
    )  # fmt: skip
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("next ")
    assert "docs/quickstart.md" in last and "tpufeed bench my_pipeline.py" in last


@pytest.mark.parametrize("kind", ["file", "under a file", "in /proc"])
def test_an_output_that_cannot_be_a_folder_is_one_line_and_exit_2(tmp_path, kind):
    """Issue 47: --output naming a file or an unwritable path printed a traceback and exited
    1, which the CLI reference gives to a failed exactly-once check."""
    (tmp_path / "taken").write_text("mine")
    output = {
        "file": tmp_path / "taken",
        "under a file": tmp_path / "taken" / "qs",
        "in /proc": "/proc/tpufeed-qs/qs",
    }[kind]
    proc = subprocess.run(
        [sys.executable, "-m", "tpufeed.cli", "quickstart", "--output", str(output)],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"tpufeed: error: --output {output} ")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert (tmp_path / "taken").read_text() == "mine"
    assert not os.path.exists("/proc/tpufeed-qs")


def test_a_read_only_output_is_refused_before_any_work(read_only_dir):
    """A folder that exists but cannot be written (root writes through permissions, so a
    read-only tmpfs stands for it), and one that cannot be made in it."""
    from tpufeed.cli.quickstart import writable_folder
    from tpufeed.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"cannot be written: Read-only file sys"):
        writable_folder(read_only_dir)
    with pytest.raises(InvalidArgumentError, match=r"/new cannot be made: Read-only"):
        writable_folder(read_only_dir / "new")


def test_help_says_what_the_quickstart_does_and_where_to_go_next():
    """Issue 47: `tpufeed --help` and `quickstart --help` had no description, docs or example."""
    from tpufeed.cli.program import build_parser

    parser = build_parser()
    top = parser.format_help()
    assert "examples:\n  tpufeed quickstart " in top and "docs/reference/cli.md" in top
    quick = next(a for a in parser._actions if a.dest == "command").choices["quickstart"]
    words = " ".join(quick.format_help().split())  # the description is wrapped
    assert "exactly once per epoch" in words and "exit 1 if either check fails" in words
    text = quick.format_help()  # the examples keep their lines
    assert "  tpufeed quickstart --epochs 2\n" in text and "tpufeed bench my_pipeline.py" in text
