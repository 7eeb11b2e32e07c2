"""The benchmarks as the README runs them: as scripts (no module of benchmarks/ may shadow the
standard library), and the profiler saying how to install what it needs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_no_benchmark_module_shadows_the_standard_library():
    """`python benchmarks/x.py` puts benchmarks/ first on sys.path: a profile.py there broke
    every `import cProfile` (Beam imports it)."""
    names = [
        name[:-3] for name in os.listdir(os.path.join(ROOT, "benchmarks")) if name.endswith(".py")
    ]
    assert [n for n in names if n in sys.stdlib_module_names] == []


@pytest.mark.slow
def test_the_readme_build_benchmark_runs_as_a_script(tmp_path):
    pytest.importorskip("apache_beam")
    result = subprocess.run(
        [
            sys.executable,
            "benchmarks/build.py",
            "--records",
            "40",
            "--num-shards",
            "2",
            "--workdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tpufeed build, 1 worker " in result.stdout
    assert "tpufeed build, 2 workers " in result.stdout


def test_the_build_benchmark_measures_the_statistics_side_by_side(tmp_path):
    pytest.importorskip("apache_beam")
    result = subprocess.run(
        [sys.executable, "benchmarks/build.py", "--records", "40", "--num-shards", "2"]
        + ["--workers", "1", "--statistics-off", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]  # the same shards either way
    assert "tpufeed build, 1 worker, no statistics " in result.stdout
    for what in ("wall", "CPU"):
        assert f"statistics cost (1 worker, {what} time): " in result.stdout
    assert "pooled over the rounds" in result.stdout


def test_the_profiler_says_how_to_install_py_spy():
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.profiling", "--records", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": ""},
    )
    assert result.returncode == 2
    assert "py-spy is not installed" in result.stderr and ".[dev]" in result.stderr
    assert "Traceback" not in result.stderr


def test_decode_ab_compares_two_codec_files():
    codec = os.path.join(ROOT, "tpufeed", "codec.py")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.decode_ab",
            codec,
            codec,
            "--rounds",
            "3",
            "--calls",
            "5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [
        line for line in result.stdout.splitlines() if line.startswith("| ") and "µs" not in line
    ]
    assert [row.split(" | ")[0] for row in rows] == [
        "| arrays and ints",
        "| an image",
        "| text and numbers",
        "| bool masks",
    ]


def _run_module(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def test_example_parse_compares_two_example_files():
    example = os.path.join(ROOT, "transforms", "example.py")
    result = _run_module(
        "benchmarks.example_parse", example, example, "--rounds", "2", "--calls", "5"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split(" | ")[0] for line in result.stdout.splitlines() if line.startswith("| ")]
    assert rows[1:] == [
        "| W2-like: image bytes, label, 2 floats, id",
        "| image as 3072 int64s + shape",
        "| 1024 floats, 16 ints",
    ]


@pytest.mark.emulator
def test_gcs_retry_counts_every_fault_it_retries():
    pytest.importorskip("gcp_storage_emulator")
    retry = os.path.join(ROOT, "tpufeed", "storage", "retry.py")
    result = _run_module("benchmarks.gcs_retry", retry, retry, "--reads", "20", "--rounds", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [
        line.split(" | ")
        for line in result.stdout.splitlines()
        if line.startswith("| before") or line.startswith("| after")
    ]
    assert len(rows) == 2
    # Every retry is one request more. A run on a loaded machine once counted 10 retries for
    # 11 faults injected (not pinned down: the transport below tpufeed may take a reset on a
    # reused connection itself), so a fault need not be a retry of tpufeed's.
    for _, _, retries, requests, faults in (row[:4] + [row[4].rstrip(" |")] for row in rows):
        assert 0 < int(retries) <= int(faults) and int(requests) == 20 + int(retries)


def test_another_checkouts_library_brings_its_own_transforms(tmp_path):
    """benchmarks/trees.py: with the library first on sys.path, a process (and the workers it
    starts, which get its sys.path) imports that checkout's tpufeed and its transforms, not the
    editable install's transforms."""
    from benchmarks.trees import library

    tree = tmp_path / "tree"
    (tree / "tpufeed" / "ops").mkdir(parents=True)
    (tree / "tpufeed" / "__init__.py").write_text("WHERE = 'tree'\n")
    (tree / "tpufeed" / "ops" / "__init__.py").write_text("")
    (tree / "transforms").mkdir()
    (tree / "transforms" / "__init__.py").write_text("WHERE = 'tree transforms'\n")
    folder = library(str(tree), str(tmp_path / "library"))
    code = "import tpufeed, tpufeed.ops, tpufeed.transforms as t; print(tpufeed.WHERE, t.WHERE)"
    env = {**os.environ, "PYTHONPATH": folder, "PYTHONSAFEPATH": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == "tree tree transforms", done.stderr


def test_anchor_instructions_names_the_systems_it_counts(capsys):
    from benchmarks import anchor_instructions

    with pytest.raises(SystemExit):
        anchor_instructions.main(["--systems", "torch,grain-map"])
    assert "unknown systems ['grain-map']; choose from torch, bare-loop, tpufeed" in (
        capsys.readouterr().err
    )
