"""The check that a portable runner's workers can run the build: which runners get it, and
the one-line errors, in bounded time, for workers that cannot import tpufeed or never start
(Beam's job service would wait for those with no end)."""

from __future__ import annotations

import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tests.beam.worker_pool import python_without_beam, python_without_tpufeed, worker_pool
from tpufeed import cli
from tpufeed.beam.workers.worker_check import _check_version, needs_check


@pytest.mark.parametrize(
    "args, checked",
    [
        ((), False),
        (("--runner", "DataflowRunner"), False),
        (("--runner", "PortableRunner", "--environment_type", "LOOPBACK"), False),
        (("--runner", "PortableRunner", "--environment_type=loopback"), False),
        (("--runner", "PortableRunner", "--environment_type", "EXTERNAL"), True),
        (("--runner", "PortableRunner"), True),  # Beam's default: a Docker container
        (("--runner", "FlinkRunner", "--environment_type", "PROCESS"), True),
        (
            (
                "--runner",
                "apache_beam.runners.portability.spark_runner.SparkRunner",
            ),
            True,
        ),
    ],
)
def test_the_runners_whose_workers_are_not_the_launcher_are_checked(args, checked):
    assert needs_check(args) is checked


def test_workers_with_another_tpufeed_fail_naming_both_versions():
    with pytest.raises(tpufeed.TpufeedError, match=r"tpufeed \S+, the launcher 0\.0\.0\.dev9"):
        _check_version(0, "0.0.0.dev9")
    assert _check_version(5, tpufeed.__version__) == 5


def _build(tmp_path, capsys, address: str, *args: str) -> tuple[int, str]:
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    code = cli.main(
        [
            "build",
            "-q",
            "--input",
            str(tmp_path / "in.jsonl"),
            "--output",
            str(tmp_path / "out"),
            "--runner",
            "PortableRunner",
            "--job_endpoint",
            "embed",
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            address,
            *args,
        ]
    )
    return code, capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_workers_that_cannot_import_tpufeed_fail_the_build_in_one_line(tmp_path, capsys):
    python = python_without_tpufeed(tmp_path / "env")
    with worker_pool(python, tmp_path / "pool.log") as address:
        code, err = _build(tmp_path, capsys, address)
    assert code != 0 and err.count("\n") == 1, err
    assert f"--environment_type EXTERNAL {address}" in err
    assert "cannot import what the build needs (No module named 'tpufeed')" in err
    assert f"install tpufeed=={tpufeed.__version__} there" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_workers_that_never_start_fail_the_build_after_the_timeout(tmp_path, capsys):
    python = python_without_beam(tmp_path / "env")
    with worker_pool(python, tmp_path / "pool.log") as address:
        code, err = _build(tmp_path, capsys, address, "--worker-start-timeout", "8")
    assert code != 0 and err.count("\n") == 1, err
    assert "the check job did not finish within 8 s (--worker-start-timeout)" in err
    assert "No module named 'apache_beam'" in (tmp_path / "pool.log").read_text()
    assert not (tmp_path / "out").exists()


def test_the_timeout_must_be_positive(tmp_path):
    from tpufeed.beam import BuildConfig

    for bad in (0, -1.0, True, "60"):
        with pytest.raises(tpufeed.InvalidArgumentError, match="--worker-start-timeout"):
            BuildConfig(inputs=("x.jsonl",), output=str(tmp_path), worker_start_timeout=bad)
