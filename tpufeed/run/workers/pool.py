"""WorkerPool: starts worker processes, talks to them over pipes, and never leaves one behind."""

from __future__ import annotations

import atexit
import os
import select
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from tpufeed.errors import InvalidArgumentError, WorkerError
from tpufeed.observe import counts, timeline
from tpufeed.run.watch import beacon_file, beacon_map
from tpufeed.run.workers import failures
from tpufeed.run.workers.environment import worker_environment
from tpufeed.run.workers.failures import rebuild_error
from tpufeed.run.workers.forked import ForkedProcess
from tpufeed.run.workers.forkserver import ForkServer, python_running, shared_server
from tpufeed.run.workers.inbox import Inbox
from tpufeed.run.workers.liveness import STOPPED_S, StoppedClock, is_stopped
from tpufeed.run.workers.messages import (
    Answer,
    Cramped,
    Dropped,
    Failure,
    Ready,
    Start,
    encode_released,
    encode_spill,
    encode_start,
    encode_stop,
)
from tpufeed.run.workers.segment_owners import remove_orphans
from tpufeed.run.workers.slots import SlotMaps

_LIVE_POOLS: weakref.WeakSet = weakref.WeakSet()
_POLL_S = 0.5


class WorkerPool:
    """`count` worker processes running one pipeline plan.

    Every wait for their messages also watches them: a worker that has ended, or closed its
    pipe, raises `WorkerError` at once; one stopped (SIGSTOP) for `stopped_s` seconds of the
    wait raises too (None: wait for it). `work_of(worker)` words what a worker was given, for
    those errors (the executor that deals the work sets it).
    """

    def __init__(
        self, init: dict[str, Any], count: int, prefix: str, stopped_s: float | None = STOPPED_S
    ):
        self.slot_maps = SlotMaps(prefix)
        self.stopped_s = stopped_s
        self.work_of: Callable[[int], str] = lambda worker: ""
        self._stopped = StoppedClock()
        self._looked = time.monotonic()
        self._procs: list[subprocess.Popen | ForkedProcess] = []
        self._tasks: list[Connection] = []
        self._results: list[Inbox] = []
        self._pending: list[tuple[int, Answer | Failure]] = []  # read, not handed out yet
        self.cramped: dict[int, Cramped] = {}  # worker: its batch that waits for room
        self._closed = False
        self._ready: list[int] = []
        self._poll: select.poll | None = None
        self._workers_by_fd: dict[int, int] = {}
        self._beacon_fd = beacon_file(count)  # unlinked at once: nothing to clean up
        self.beacons = beacon_map(self._beacon_fd, count)
        _LIVE_POOLS.add(self)
        payload = _pickled({**init, "prefix": prefix})  # once: a 200-worker host pickles once
        env = worker_environment()
        self._server = server = shared_server()
        if server is None:  # else the fork server did as it started
            _sweep_once()
        try:
            for index in range(count):
                task_r, task_w = os.pipe()
                result_r, result_w = os.pipe()
                proc = self._spawn(index, server, task_r, result_w, env)
                os.close(task_r)
                os.close(result_w)
                self._procs.append(proc)
                self._tasks.append(Connection(task_w, readable=False))
                self._results.append(Inbox(result_r))
                self._tasks[-1].send_bytes(encode_start(Start(list(sys.path), payload, index)))
        except BaseException:
            self.close()
            raise

    def _spawn(
        self, index: int, server: ForkServer | None, task_r: int, result_w: int, env: Any
    ) -> subprocess.Popen | ForkedProcess:
        """Worker `index`, forked by the fork server, or a fresh interpreter without one."""
        beacon = self._beacon_fd
        proc: subprocess.Popen | ForkedProcess = (
            _forked(server, task_r, result_w, beacon, self.stopped_s)
            if server is not None
            else subprocess.Popen(
                python_running(
                    "tpufeed.run.workers.worker",
                    [str(task_r), str(result_w), str(os.getpid()), str(beacon)],
                ),
                pass_fds=(task_r, result_w, beacon),
                stdin=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        )
        counts.count("workers_started")
        if timeline.recording() is not None:
            # A forked worker's pid is known once the fork server answers, which waits for its
            # imports: asking here would hold the first batch back (0.4 s) for a trace's label.
            pid = proc.pid if isinstance(proc, subprocess.Popen) else proc.known_pid
            timeline.instant("worker started", "workers", {"worker": index, "pid": pid})
        return proc

    @property
    def size(self) -> int:
        return len(self._procs)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def ready(self) -> list[int]:
        """Workers that have started (their first message, "ready", arrived), without waiting.

        A worker that failed to start raises here, with its traceback.
        """
        if len(self._ready) < len(self._procs):
            self._pending += self._read(0.0)
            for worker, message in self._pending:
                if isinstance(message, Failure) and message.task_id == -1:
                    raise rebuild_error(message.fields, worker)
        return self._ready

    def send(self, worker: int, message: bytes) -> None:
        """Sends one encoded message (`messages.encode_*`) to `worker`."""
        size = len(message)  # framed as `Connection.send_bytes` frames it, in one write
        header = (
            size.to_bytes(4, "big", signed=True)
            if size < 0x7FFFFFFF
            else b"\xff\xff\xff\xff" + size.to_bytes(8, "big")
        )
        try:
            view = memoryview(header + message)
            fd = self._tasks[worker].fileno()
            while view:
                view = view[os.write(fd, view) :]
        except (BrokenPipeError, OSError):
            raise self._death(worker) from None

    def send_released(self, worker: int) -> None:
        """Tells `worker` the bytes of its segments this process has unmapped, if any: they
        no longer count against its share of the shared-memory budget."""
        nbytes = self.slot_maps.take_released(worker)
        if nbytes:
            self.send(worker, encode_released(nbytes))

    def spill(self, worker: int) -> None:
        """Tells `worker` to send its batch that waits for room (`cramped`) through the pipe."""
        self.send(worker, encode_spill(self.cramped.pop(worker).task_id))

    def receive_any(self, timeout: float | None = _POLL_S) -> list[tuple[int, Answer | Failure]]:
        """(worker, message) for every message that arrives within `timeout` (None: the
        default wait), from any worker.

        A worker that died raises WorkerError: its pipe reads as closed at once, and a worker
        that is gone while its pipe stays open, or stays stopped, is caught by a look at every
        worker each `_POLL_S` of waiting.
        """
        if self._pending:
            out, self._pending = self._pending, []
            return out
        out = self._read(_POLL_S if timeout is None else timeout)
        if timeout != 0 and time.monotonic() - self._looked >= _POLL_S:
            self._look()
        return out

    def _look(self) -> None:
        """Raises WorkerError for a worker that has ended (its last messages read first), or
        that has stayed stopped for `stopped_s` of this process's waiting."""
        self._looked = time.monotonic()
        stopped = []
        for worker, proc in enumerate(self._procs):
            if _ended(proc) and not self._results[worker].waiting():
                raise self._death(worker)
            if is_stopped(proc.pid):
                stopped.append(worker)
        for worker, seconds in self._stopped.look(stopped).items():
            if self.stopped_s is not None and seconds >= self.stopped_s:
                raise self._stopped_error(worker, seconds)

    def _read(self, timeout: float) -> list[tuple[int, Answer | Failure]]:
        """Every whole message that arrives within `timeout`: one read takes all a worker has
        sent (several answers, when the parent is the slower side). "ready" is noted here,
        segments a worker gave back are unmapped here, and a batch that waits for room is
        noted in `cramped`."""
        if self._poll is None:  # one poll object, registered once: no selector per wait
            self._poll = select.poll()
            for worker, inbox in enumerate(self._results):
                self._poll.register(inbox.fd, select.POLLIN)
                self._workers_by_fd[inbox.fd] = worker
        out: list[tuple[int, Answer | Failure]] = []
        for fd, _ in self._poll.poll(timeout * 1000):
            worker = self._workers_by_fd[fd]
            try:
                messages = self._results[worker].read()
            except (EOFError, OSError):
                raise self._death(worker) from None
            for message in messages:
                if isinstance(message, Ready):
                    self._ready.append(worker)
                elif isinstance(message, Dropped):
                    self.slot_maps.drop(worker, message.slots)
                    self.send_released(worker)
                elif isinstance(message, Cramped):
                    self.cramped[worker] = message
                else:
                    out.append((worker, message))
        return out

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Blocks until a worker has started (or raises, naming why none could, or that none
        did within `timeout_s`)."""
        started = time.monotonic()
        while not self.ready():
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                from tpufeed.errors import InputTimeoutError

                raise InputTimeoutError(
                    f"no item within timeout_s={timeout_s:g}: none of {self.size} worker(s) "
                    f"(pids {self.pids}) started; they import the pipeline's modules and "
                    "unpickle its functions first. The pipeline is stopped."
                )
            for worker, message in self.receive_any():
                if isinstance(message, Failure):
                    raise rebuild_error(message.fields, worker)

    def _lost(self, worker: int, how: str) -> None:
        counts.count("workers_lost")
        timeline.instant("worker lost", "workers", {"worker": worker, "how": how})

    def _death(self, worker: int) -> WorkerError:
        proc = self._procs[worker]
        try:
            code = proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        lost = getattr(proc, "lost", None)
        self._lost(worker, "never started" if lost is not None else f"ended ({code})")
        if lost is not None:
            return failures.never_started(worker, lost)
        return failures.ended(worker, proc.pid, code, self.work_of(worker))

    def segment_lost(self, worker: int, path: str) -> WorkerError:
        """The error for a batch whose shared-memory file `path` was gone when this process came
        to map it: `worker` removed it as it ended (a SIGTERM after it answered), which reads as
        its death; or, while it still runs, something else deletes files in /dev/shm."""
        try:
            self._procs[worker].wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._lost(worker, "its batch's shared memory was removed")
            return failures.segment_removed(worker, self._procs[worker].pid, path)
        return self._death(worker)

    def _stopped_error(self, worker: int, seconds: float) -> WorkerError:
        pid = self._procs[worker].pid
        self._lost(worker, f"stopped for {seconds:.0f} s")
        server, frozen = self._server, None
        if server is not None and is_stopped(server.proc.pid):  # nothing of the run answers
            frozen = server.proc.pid
            server.give_up(f"the tpufeed fork server (pid {frozen}) is stopped (SIGSTOP)")
        stopped_s = self.stopped_s or 0.0
        return failures.stopped(worker, pid, seconds, stopped_s, self.work_of(worker), frozen)

    def close(self) -> None:
        """Stops every worker (asking first, then killing) and removes their shared memory."""
        if self._closed:
            return
        self._closed = True
        for conn in self._tasks:
            try:
                conn.send_bytes(encode_stop())
            except (BrokenPipeError, OSError):
                pass
        for worker, proc in enumerate(self._procs):
            if is_stopped(proc.pid):  # it would not hear the stop: no point in waiting for it
                proc.kill()
            elif worker not in self._ready and not _ended(proc):
                # Still starting (importing the pipeline's modules as it unpickles it, which
                # for a torch Dataset takes seconds): it would read the stop only then. SIGTERM
                # is its clean exit, now.
                proc.terminate()
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for conn in self._tasks:
            conn.close()
        for inbox in self._results:
            inbox.close()
        self.slot_maps.close()
        if getattr(self, "_beacon_fd", None) is not None:
            os.close(self._beacon_fd)

    def __del__(self) -> None:
        self.close()


def _ended(proc: subprocess.Popen | ForkedProcess) -> bool:
    """Whether `proc` has ended, or (forked) will never start."""
    return proc.poll() is not None or getattr(proc, "lost", None) is not None


def _forked(
    server: ForkServer, task_r: int, result_w: int, beacon_fd: int, stopped_s: float | None
) -> ForkedProcess:
    """A worker forked by the fork server, on the pipes and beacon given."""
    argv = ["{0}", "{1}", str(os.getpid()), "{2}"]
    try:
        ticket = server.spawn(argv, [task_r, result_w, beacon_fd], stopped_s)
    except OSError as error:
        raise WorkerError(f"could not ask the tpufeed fork server for a worker: {error}") from None
    return ForkedProcess(server, ticket, stopped_s)


def _pickled(init: dict[str, Any]) -> bytes:
    """The worker's start message; a pipeline that cannot be sent to a process is named."""
    try:
        return cloudpickle.dumps(init)
    except Exception as error:  # noqa: BLE001 - cloudpickle raises TypeError, PicklingError, ...
        plan = init["plan"]
        parts = [("the source", plan.source)]
        parts += [
            (stage.name, stage.fn) for stage in (*plan.head, *plan.tail) if hasattr(stage, "fn")
        ]
        culprit = next((name for name, part in parts if not _picklable(part)), "the pipeline")
        raise InvalidArgumentError(
            f"workers send the pipeline to worker processes, but {culprit} cannot be pickled "
            f"({type(error).__name__}: {error}). Make it capture no lock, open file, socket or "
            "generator (create those inside the function), or run it with workers(0)."
        ) from None


def _picklable(value: Any) -> bool:
    try:
        cloudpickle.dumps(value)
        return True
    except Exception:  # noqa: BLE001 - see _pickled
        return False


_swept: list[bool] = []  # this process has removed the segments of owners gone


def _sweep_once() -> None:
    """Segments of iterators killed with their workers, removed once per process where no fork
    server does it (`segment_owners`)."""
    if not _swept:
        _swept.append(True)
        remove_orphans()


def close_all_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()


atexit.register(close_all_pools)
