"""Beam's own worker pool (`apache_beam.runners.worker.worker_pool_main`) in a subprocess, for
builds with `--environment_type EXTERNAL`: the SDK workers it starts are separate processes
that share nothing with the launcher but the pipeline, as on Flink or Spark.

The pool starts each worker as `python -c ...` from PATH; `python` here is a script in a
folder of the test's, so a test picks the worker's environment: this one, one whose Python
cannot import tpufeed, or one without apache_beam at all.
"""

from __future__ import annotations

import os
import shlex
import signal
import site
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _wait_listening(process: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the worker pool exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the worker pool did not listen on {port} within 60 s")


def _python_script(folder: Path, command: str, env: dict[str, str] | None = None) -> Path:
    """A `python` in `folder` that runs `command` with `env` added."""
    folder.mkdir(parents=True, exist_ok=True)
    sets = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
    script = folder / "python"
    script.write_text(f'#!/bin/sh\n{sets}exec {command} "$@"\n')
    script.chmod(0o755)
    return folder


def this_python(folder: Path) -> Path:
    """Workers in this test's environment (its Python, its PYTHONPATH)."""
    return _python_script(folder / "bin", shlex.quote(sys.executable))


def python_without_tpufeed(folder: Path) -> Path:
    """Workers whose Python has everything this one has but tpufeed: another environment.

    `-S` skips site-packages (and the .pth file of an editable install); PYTHONPATH is a
    folder of links to every installed package but tpufeed."""
    packages = folder / "packages"
    packages.mkdir(parents=True)
    for root in [*site.getsitepackages(), site.getusersitepackages()]:
        for entry in Path(root).glob("*") if os.path.isdir(root) else []:
            link = packages / entry.name
            if not entry.name.startswith(("tpufeed", "__editable__")) and not link.exists():
                link.symlink_to(entry)
    command = f"{shlex.quote(sys.executable)} -S"
    return _python_script(folder / "bin", command, {"PYTHONPATH": str(packages)})


def python_without_beam(folder: Path) -> Path:
    """Workers in a fresh virtual environment: no apache_beam, so each dies before it
    connects to the runner."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return _python_script(
        folder / "bin", shlex.quote(str(venv / "bin" / "python")), {"PYTHONPATH": ""}
    )


@contextmanager
def worker_pool(python_folder: Path, log: Path) -> Iterator[str]:
    """`localhost:PORT` of a worker pool whose workers run the `python` in `python_folder`;
    the pool and every worker it started are killed on exit."""
    port = _free_port()
    env = dict(os.environ, PATH=f"{python_folder}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main"]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, "--service_port", str(port)],
            env=env,
            cwd=log.parent,  # not the checkout, whose tpufeed/ `python -c` would import
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, workers included
        )
    try:
        _wait_listening(process, port, log)
        yield f"localhost:{port}"
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the pool and its workers are gone already
            pass
        process.wait(timeout=30)
