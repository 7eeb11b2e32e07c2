"""Worker processes for `tpufeed build --workers N`, started before the build imports Beam.

A worker process spends about a second importing Beam's SDK harness and the build's steps
before it reads a record. Started by the runner, that second comes after the build process
has imported Beam and made the pipeline; started here, first thing, the imports of all of them
overlap. Each worker waits on a socket in a private folder; the runner's worker command
(`worker_shim`) hands it the runner's environment and waits for its exit status, so to the
runner it is the process it started. A shim that finds no worker left starts one cold.

Every process started here ends with the build: on leaving the `with` block its stdin is
closed (a worker that was never asked ends at once), and one still running after a short
wait is killed.

>>> with WarmWorkers(2, logging.INFO) as warm:  # doctest: +SKIP
...     runner = FnApiRunner(default_environment=SubprocessSDKEnvironment.from_command_string(
...         command_string=warm.command()))
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from types import TracebackType

from tpufeed.beam.workers.worker_process import argv

__all__ = ["WarmWorkers"]

_WAIT_S = 5.0  # for a worker to end after its stdin closes, before it is killed


class WarmWorkers:
    """`count` worker processes, started now and ended on leaving the `with` block."""

    def __init__(self, count: int, level: int):
        self._argv = argv(level)
        self._folder = tempfile.mkdtemp(prefix="tpufeed-workers-")
        self._processes: list[subprocess.Popen[bytes]] = []
        try:
            for slot in range(count):
                self._processes.append(self._start(slot))
        except BaseException:
            self.close()
            raise

    def _start(self, slot: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*self._argv, "--warm", self._folder, str(slot)], stdin=subprocess.PIPE
        )

    def command(self) -> str:
        """The shell command the runner starts for each worker: one of these, handed over."""
        shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_shim.py")
        level = self._argv[-1]
        words = [sys.executable, "-S", shim, self._folder, str(len(self._processes)), level]
        return shlex.join(words)

    def close(self) -> None:
        """Ends every worker (closing its stdin, then killing one that lingers) and removes
        the folder."""
        for process in self._processes:
            if process.stdin is not None and not process.stdin.closed:
                try:
                    process.stdin.close()
                except OSError:  # it has ended: its pipe is broken
                    pass
        for process in self._processes:
            try:
                process.wait(timeout=_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> WarmWorkers:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
