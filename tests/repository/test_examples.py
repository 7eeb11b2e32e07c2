"""The examples run here, with small step counts (issue 5 item 4)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


def run_example(name: str, *args: str, devices: int = 1, timeout: int = 180) -> str:
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"{name} {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def field(text: str, name: str) -> str:
    match = re.search(rf"{name} (\S+)", text)
    assert match, f"no {name!r} in:\n{text}"
    return match.group(1)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("digits"))


def test_jax_example_trains_on_8_devices_and_resumes_exactly(data, tmp_path):
    ckpt = tmp_path / "ckpt"
    straight = run_example(
        "jax_train.py",
        "--data",
        data,
        "--steps",
        "40",
        "--checkpoint-at",
        "15",
        "--checkpoint",
        str(ckpt),
        devices=8,
    )
    assert field(straight, "devices") == "8" and field(straight, "steps") == "40"
    saved = ckpt / "15"  # CheckpointManager's step folder: the parameters and the data state
    assert (saved / "params").is_dir() and (saved / "data" / "process_0-of-1.json").exists()
    resumed = run_example(
        "jax_train.py", "--data", data, "--steps", "40", "--resume", str(ckpt), devices=8
    )
    assert field(resumed, "checksum") == field(straight, "checksum")
    assert float(field(straight, "accuracy")) > 0.3


def test_tf_keras_fit_example(data):
    out = run_example("tf_keras_fit.py", "--data", data, "--epochs", "2")
    assert "element_spec" in out and float(field(out, "accuracy")) > 0.3


def test_tf_keras_fit_example_killed_and_run_again_ends_with_the_same_model(data, tmp_path):
    backup = str(tmp_path / "backup")
    straight = run_example("tf_keras_fit.py", "--data", data, "--epochs", "2")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    killed = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "tf_keras_fit.py"),
            "--data",
            data,
            "--epochs",
            "2",
            "--backup-dir",
            backup,
            "--kill-at-step",
            "35",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert killed.returncode == -9, killed.stderr[-3000:]  # SIGKILL after step 35, backup at 30
    resumed = run_example(
        "tf_keras_fit.py", "--data", data, "--epochs", "2", "--backup-dir", backup
    )
    assert field(resumed, "weights") == field(straight, "weights")
    assert field(resumed, "accuracy") == field(straight, "accuracy")


@pytest.fixture(scope="module")
def torch_straight(data, tmp_path_factory) -> tuple[str, Path]:
    """The torch example run through once without DataLoader workers, checkpointing at step 10."""
    ckpt = tmp_path_factory.mktemp("torch") / "torch.pt"
    out = run_example(
        "torch_train.py",
        "--data",
        data,
        "--epochs",
        "2",
        "--checkpoint-at",
        "10",
        "--checkpoint",
        str(ckpt),
    )
    return out, ckpt


def test_torch_example_resumes_exactly(data, torch_straight):
    straight, ckpt = torch_straight
    assert field(straight, "epoch") == "True"
    resumed = run_example("torch_train.py", "--data", data, "--epochs", "2", "--resume", str(ckpt))
    assert field(resumed, "loss") == field(straight, "loss")
    assert int(field(straight, "records")) == int(field(resumed, "records")) + 10 * 64


@pytest.mark.multiprocess
def test_torch_example_checkpoints_with_dataloader_workers_and_resumes_exactly(
    data, tmp_path, torch_straight
):
    """Step 30 is in the second epoch. With 2 DataLoader workers the loop receives the batches
    of 0 workers (the same final loss), each record once per epoch."""
    ckpt = tmp_path / "torch-workers.pt"
    straight = run_example(
        "torch_train.py",
        "--data",
        data,
        "--epochs",
        "2",
        "--workers",
        "2",
        "--checkpoint-at",
        "30",
        "--checkpoint",
        str(ckpt),
    )
    assert field(straight, "epoch") == "True"
    assert field(straight, "loss") == field(torch_straight[0], "loss")
    resumed = run_example(
        "torch_train.py", "--data", data, "--epochs", "2", "--workers", "2", "--resume", str(ckpt)
    )
    assert field(resumed, "loss") == field(straight, "loss")
    assert int(field(straight, "records")) == int(field(resumed, "records")) + 30 * 64


def test_lm_example_trains_on_a_packed_mixture_and_resumes_exactly(tmp_path):
    data, ckpt = tmp_path / "corpora", tmp_path / "ckpt"
    straight = run_example(
        "lm_pretrain.py",
        "--data",
        str(data),
        "--steps",
        "40",
        "--checkpoint-at",
        "20",
        "--checkpoint",
        str(ckpt),
        devices=2,
    )
    assert (ckpt / "input_state.json").exists()
    resumed = run_example(
        "lm_pretrain.py", "--data", str(data), "--steps", "40", "--resume", str(ckpt), devices=2
    )
    assert field(resumed, "checksum") == field(straight, "checksum")
    assert float(field(straight, "full")[:-1]) > 95  # rows full, in percent
    losses = [float(x) for x in re.findall(r"loss (\S+)", straight)]
    assert losses[-1] < losses[0]


def test_vision_classifier_trains_with_the_training_crops_and_evaluates_with_the_eval_crop(
    tmp_path,
):
    """Built from an image folder by `tpufeed build`; a quarter of each class held out."""
    args = ("--data", str(tmp_path / "vision"), "--steps", "30", "--per-class", "32")
    out = run_example("vision_classifier.py", *args)
    assert float(field(out, "last-loss")) < float(field(out, "first-loss"))
    assert float(field(out, "accuracy")) > 0.6 and int(field(out, "eval-images")) == 24


@pytest.mark.multiprocess
def test_input_bound_example_sees_the_wait_three_ways_and_draws_the_timeline(tmp_path):
    picture = tmp_path / "timeline.png"
    out = run_example("input_bound.py", "--steps", "40", "--picture", str(picture))
    assert float(field(out, "wait_fraction")) > 0.3  # two workers cannot feed this loop
    assert float(field(out, "tpufeed/next")) > 0.3  # the profile says so too
    assert float(field(out, "tpufeed_next_wait_seconds_sum")) > 0
    assert picture.stat().st_size > 10_000  # a PNG with the tracks drawn
