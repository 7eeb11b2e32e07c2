"""`tpufeed build` through Beam's portable job API (`--runner PortableRunner --job_endpoint
embed`), the path Flink and Spark take: a pipeline proto, and SDK workers that are the
launcher's own process (LOOPBACK) or separate processes started by Beam's worker pool
(EXTERNAL), which share nothing with the launcher but the pipeline. Either way the shards and
the manifest are byte-identical to the in-process runner's, and the steps' counters reach the
build's count check."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tests.beam.expanding import EXPAND
from tests.beam.worker_pool import this_python, worker_pool
from tpufeed import cli

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _inputs(tmp_path) -> list[str]:
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(300):
            f.write(json.dumps({"id": i, "text": "w" * (i % 17), "v": [i, -i]}) + "\n")
    with open(tmp_path / "b.jsonl", "w") as f:
        f.write(
            "".join(json.dumps({"id": i, "text": "c", "v": [0, 1]}) + "\n" for i in range(300, 420))
        )
    (tmp_path / "t.py").write_text(EXPAND)
    return [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]


def _build(tmp_path, capsys, name: str, *beam_args: str) -> dict[str, bytes]:
    """Builds the two inputs with the --transform into 3 shards; returns the dataset's files
    after checking that it opens, verified, with the records the transform leaves."""
    inputs = _inputs(tmp_path)
    out = tmp_path / name
    code = cli.main(
        [
            "build",
            "-q",
            "--input",
            *inputs,
            "--output",
            str(out),
            "--num-shards",
            "3",
            "--transform",
            f"{tmp_path / 't.py'}:expand",
            *beam_args,
        ]
    )
    assert code == 0, capsys.readouterr().err
    files = {}
    for entry in sorted(os.listdir(out)):
        with open(out / entry, "rb") as f:
            files[entry] = f.read()
    assert len(tpufeed.Dataset.open(str(out), verify=True).source) == _EXPECTED
    return files


_EXPECTED = sum(0 if i % 7 == 3 else 2 if i % 5 == 0 else 1 for i in range(420))
_PORTABLE = ("--runner", "PortableRunner", "--job_endpoint", "embed")


def test_loopback_workers_give_the_local_shards(tmp_path, capsys):
    local = _build(tmp_path, capsys, "local")
    portable = _build(tmp_path, capsys, "loopback", *_PORTABLE, "--environment_type", "LOOPBACK")
    assert len(local) == 4 and portable == local


def test_worker_pool_workers_give_the_local_shards(tmp_path, capsys):
    local = _build(tmp_path, capsys, "local")
    with worker_pool(this_python(tmp_path / "env"), tmp_path / "pool.log") as address:
        portable = _build(
            tmp_path,
            capsys,
            "external",
            *_PORTABLE,
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            address,
        )
    assert len(local) == 4 and portable == local
    assert "Starting worker with command" in (tmp_path / "pool.log").read_text()
