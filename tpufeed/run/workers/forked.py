"""`ForkedProcess`: the parent's handle on a worker its fork server forked, with the parts of
`subprocess.Popen` the pool uses. The worker is the server's child, not the parent's: the
kernel says whether it runs, and the server, which reaps it, how it ended."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tpufeed.run.workers.forkserver import ForkServer
from tpufeed.run.workers.liveness import STOPPED_S, process_exists, process_state, zombie_status


class ForkedProcess:
    """A worker forked by the server, with the parts of `subprocess.Popen` the pool uses.

    `lost` says why it never started or cannot be asked about (its fork server is gone or
    stopped); it then counts as ended, with returncode None.
    """

    def __init__(self, server: ForkServer, ticket: int, stopped_s: float | None = STOPPED_S):
        self._server, self._ticket, self._stopped_s = server, ticket, stopped_s
        self._pid: int | None = None
        self.returncode: int | None = None
        self.lost: str | None = None

    @property
    def pid(self) -> int:
        """Its pid (the first call waits for the server to have forked it; -1 where the server
        could not, and `lost` says why)."""
        if self._pid is None:
            try:
                self._pid = self._server.pid(self._ticket, self._stopped_s)
            except OSError as error:
                self.lost, self._pid = str(error), -1
        return self._pid

    @property
    def known_pid(self) -> int | None:
        """Its pid if the server has already said it, without waiting for the server."""
        return self._pid

    def poll(self) -> int | None:
        """Its returncode once it has ended, else None. The kernel is asked first: a running
        worker costs no round trip to the server, and a zombie says how it ended (its server,
        which reaps it, may be stopped); the server, for one already reaped."""
        if self.returncode is not None or self.pid < 0:
            return self.returncode
        if process_state(self.pid) not in ("", "Z", "X"):
            return None
        self.returncode = zombie_status(self.pid)
        if self.returncode is not None:
            return self.returncode
        try:
            self.returncode = self._server.status(self.pid, self._stopped_s)
        except OSError:  # the server is gone, and with it the way to know: ask the kernel
            self.returncode = None if process_exists(self.pid) else -signal.SIGKILL
        return self.returncode

    @property
    def ended(self) -> bool:
        return self.poll() is not None or self.lost is not None

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ended:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"tpufeed worker {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, number: int) -> None:
        if self.pid < 0:
            return
        try:
            os.kill(self.pid, number)
        except ProcessLookupError:
            pass
