"""Worker processes started before the build imports Beam (`warm_workers`): the runner's
command hands each one the runner's environment and returns its exit status; a worker that is
gone is replaced by one started cold; every process ends with the build."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading

import pytest

pytest.importorskip("apache_beam")

from tpufeed.beam import BuildConfig, build
from tpufeed.beam.plan.build_plan import plan_build
from tpufeed.beam.workers.warm_workers import WarmWorkers

_SHIM = os.path.join(
    os.path.dirname(__import__("tpufeed").__file__), "beam", "workers", "worker_shim.py"
)


def _fake_worker(folder, slot: int, reply: bytes | None, got: dict) -> threading.Thread:
    """A listener in a worker's place: keeps the environment it is sent, replies `reply`
    (None: closes without a status, as a worker that died)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / f"worker.{slot}"))
    listener.listen(1)

    def serve() -> None:
        connection, _ = listener.accept()
        data = b""
        while chunk := connection.recv(4096):
            data += chunk
        got.update(json.loads(data))
        if reply is not None:
            connection.sendall(reply)
        connection.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("reply, status", [(b"0", 0), (b"3", 3), (None, 1)])
def test_the_runners_command_hands_its_environment_to_a_started_worker(tmp_path, reply, status):
    got: dict = {}
    (tmp_path / "taken.0").mkdir()  # slot 0 is another shim's
    thread = _fake_worker(tmp_path, 1, reply, got)
    shim = subprocess.run(
        [sys.executable, "-S", _SHIM, str(tmp_path), "2", "INFO"],
        env={**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": 'url: "localhost:1"\n'},
        timeout=60,
    )
    thread.join(10)
    assert shim.returncode == status
    assert got["CONTROL_API_SERVICE_DESCRIPTOR"] == 'url: "localhost:1"\n'  # newlines kept
    assert (tmp_path / "taken.1").is_dir()


def _jsonl(tmp_path, n: int = 3000) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": "x" * (i % 40)}) + "\n" for i in range(n)))
    return str(path)


def _shards(folder) -> dict[str, bytes]:
    return {
        name: (folder / name).read_bytes()
        for name in sorted(os.listdir(folder))
        if name != "manifest.json"
    }


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_started_worker_that_is_gone_is_replaced_by_one_started_cold(tmp_path):
    from tpufeed.beam.build_pipeline import run_build

    src = _jsonl(tmp_path)
    build(BuildConfig(inputs=(src,), output=str(tmp_path / "one"), num_shards=3, workers=1))
    config = BuildConfig(
        inputs=(src,), output=str(tmp_path / "two"), num_shards=3, workers=2, block_bytes=20_000
    )
    with WarmWorkers(2, logging.WARNING) as warm:
        warm._processes[0].kill()  # died before the runner asked for it
        warm._processes[0].wait()
        summary = run_build(config, plan_build(config), warm.command())
    assert summary["workers"] == 2 and summary["records_out"] == 3000
    assert _shards(tmp_path / "two") == _shards(tmp_path / "one")


def test_workers_never_asked_end_when_the_build_closes_them_and_leave_no_folder():
    warm = WarmWorkers(2, logging.WARNING)
    folder, processes = warm._folder, list(warm._processes)
    warm.close()
    # ended by their closed stdin (status 1), not killed (-9)
    assert [p.returncode for p in processes] == [1, 1]
    assert not os.path.exists(folder)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_build_that_fails_on_its_workers_leaves_no_process_and_no_folder(tmp_path):
    import glob
    import tempfile

    import psutil

    from tpufeed.errors import SourceError

    src = tmp_path / "in.jsonl"
    lines = [json.dumps({"id": i}) for i in range(2000)]
    lines[1500] = "{not json"
    src.write_text("\n".join(lines) + "\n")
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "tpufeed-workers-*")))
    # from worker processes, Beam re-raises the step's error as a RuntimeError with its text
    with pytest.raises((SourceError, RuntimeError), match=r"in\.jsonl line 1501: invalid JSON"):
        build(
            BuildConfig(
                inputs=(str(src),),
                output=str(tmp_path / "ds"),
                num_shards=2,
                workers=2,
                block_bytes=4000,
            )
        )
    # the build's processes (a fork server that other tests' pipelines keep is not one)
    build_processes = [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if any("worker_process" in part or "worker_shim" in part for part in _cmdline(p))
    ]
    assert build_processes == []
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "tpufeed-workers-*"))) == before


def _cmdline(process) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:  # gone since it was listed
        return []
