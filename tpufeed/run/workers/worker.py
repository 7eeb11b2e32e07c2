"""A worker process: `python -m tpufeed.run.workers.worker TASK_FD RESULT_FD PARENT_PID BEACON_FD`.

Started as a fresh interpreter (not forked, and without re-importing the user's `__main__`, so a
script's top-level `jax.distributed.initialize()` never runs twice). It receives the pipeline
once, then tasks: record indices to read, transform and stack into a shared-memory slot, with
the same `ChunkRunner` the parent uses.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import traceback
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from tpufeed.observe import counts, shipping, timeline
from tpufeed.ops.user_functions import Stopped
from tpufeed.run.workers.environment import forget_blas_default
from tpufeed.run.workers.messages import (
    Answer,
    AnswerMemo,
    Cramped,
    Dropped,
    Failure,
    Ready,
    Released,
    Spill,
    Start,
    Stop,
    Task,
    decode,
    encode_answer,
)
from tpufeed.run.workers.strays import end_if_stray, watch_forks

_WATCH_S = 0.2  # how often a worker checks that its parent is alive


def _exit_with_parent(parent: int) -> None:
    """Stops this worker when its parent process is gone, so no worker outlives it.

    A watch on the parent's pid rather than PR_SET_PDEATHSIG: that signal fires when the *thread*
    that started the worker exits, and iterators are often made in helper threads. The watch
    waits on a pidfd of the parent where the kernel has them (a worker forked by the fork
    server is not the parent's child), else checks every 0.2 s. SIGTERM runs the worker's clean
    exit (its shared memory unlinked); a worker stuck in native code that cannot take the
    signal is ended hard a little later.
    """
    import os
    import select
    import threading
    import time

    child = os.getppid() == parent

    def gone() -> bool:
        if child:
            return os.getppid() != parent
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False

    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
        else:
            while not gone():
                time.sleep(_WATCH_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5.0)
        os._exit(0)

    threading.Thread(target=watch, name="tpufeed-parent-watch", daemon=True).start()


def error_fields(exc: BaseException) -> dict[str, Any]:
    from tpufeed.errors import TransformError

    tb = getattr(exc, "traceback_text", None) or "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__)
    )
    message = str(exc)
    if isinstance(exc, TransformError):
        message = message.split("\n", 1)[0]
    return {
        "type": type(exc).__name__,
        "message": message,
        "record": getattr(exc, "record", None),
        "path": getattr(exc, "path", None),
        "traceback": tb,
    }


def _unsendable(exc: Exception, task: Task) -> Exception:
    """The error for elements a worker made but cannot send back to the parent."""
    import numpy as np

    from tpufeed.errors import TransformError

    first = int(np.frombuffer(task.indices, np.int64)[0])
    return TransformError(
        f"the elements made from records {first}... cannot be sent from a worker process "
        f"({type(exc).__name__}: {exc}): return numbers, strings, bytes, numpy arrays, or "
        "dicts, lists and tuples of them",
        record=first,
    )


class Worker:
    def __init__(
        self, tasks: Connection, results: Connection, init: dict[str, Any], beacon_fd: int
    ):
        from tpufeed.ops.base import StageClock
        from tpufeed.run.chunks import ChunkRunner
        from tpufeed.run.watch import beacon_at, beacon_map, labels_of
        from tpufeed.run.workers.budget import batch_too_big, worker_share
        from tpufeed.run.workers.slots import WorkerSlots

        self.tasks, self.results = tasks, results
        self.index = init["index"]
        budget: int = init["shm_budget"]  # the iterator's, split between its workers
        count: int = init["count"]
        self.slots = WorkerSlots(
            f"{init['prefix']}-w{self.index}",
            init["slots"],
            worker_share(budget, count),
            lambda nbytes: batch_too_big(nbytes, budget, count),
        )
        self.clock = StageClock()
        counts.forget_inherited()  # a forked worker's parent counted those itself
        if init.get("trace"):
            timeline.start().name_process(os.getpid(), f"tpufeed worker {self.index}")
        else:  # a worker forked while its parent recorded records nothing of its own
            timeline.stop()
        # Each task taken is marked there, for an error that names it; with a timeout, each
        # stage and record too (the parent reads where this worker is).
        self.memory = beacon_map(beacon_fd, init["count"])
        self.beacon = beacon_at(self.memory, self.index, labels_of(init["plan"]))
        self.runner = ChunkRunner(
            init["plan"], self.clock, self.beacon if init.get("watch") else None
        )
        if init.get("worker_init") is not None:  # workers(n, init=fn), before "ready"
            from tpufeed.run.workers.init_hook import run_init

            run_init(init["worker_init"], self.index, count)
        fds = [tasks.fileno(), results.fileno(), beacon_fd]
        watch_forks(fds, lambda: [self.memory, *self.slots.mappings()])
        self.backlog: deque = deque()
        self.memo = AnswerMemo()  # what the last answer sent, so the next can say "the same"
        self.task_id = -1  # the task being made
        self.asked = False  # whether its batch has told the parent it waits for room
        self.spill = False  # whether the parent has said its batch goes through the pipe

    def run(self) -> None:
        self._send(Ready())
        while True:
            if _STOPPED:  # a SIGTERM a finalizer swallowed
                raise WorkerStopped("tpufeed worker stopped by SIGTERM")
            message = self.backlog.popleft() if self.backlog else self._receive()
            if message is None:
                continue
            if isinstance(message, Stop):
                return
            started = time.perf_counter()
            try:
                answer = self._task(message)
            except Exception as exc:  # noqa: BLE001 - every failure goes to the parent
                end_if_stray(exc)
                self._send(Failure(message.task_id, error_fields(exc)))
                continue
            try:
                self._send(_observed(message, answer, started))  # pickled whole, then written
            except Exception as exc:  # noqa: BLE001 - an element that cannot be pickled
                self._send(Failure(message.task_id, error_fields(_unsendable(exc, message))))

    def _receive(self) -> Task | Stop | None:
        """The parent's next message, after releasing the slots it says are free and counting
        the segments it says it released."""
        end_if_stray()
        freed, message = decode(self.tasks.recv_bytes())
        for free in freed:
            self.slots.release(free.slot)
        if isinstance(message, Released):
            self.slots.released(message.nbytes)
            return None
        if isinstance(message, Spill):  # a late one, for a batch that found room, is no matter
            self.spill = self.spill or message.task_id == self.task_id
            return None
        return message  # type: ignore[return-value]  # Start comes once, before run()

    def _send(self, message: object) -> None:
        end_if_stray()  # a child a transform forked, come back here: never an answer of it
        self.results.send_bytes(
            encode_answer(message, self.memo)
            if isinstance(message, Answer)
            else pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        )

    def _task(self, task: Task) -> Answer:
        import numpy as np

        from tpufeed.run.workers.layout import StackedRows, write_batch, write_stacked
        from tpufeed.run.workers.slots import NoRoom

        self.task_id, self.asked, self.spill = task.task_id, False, False
        self.beacon.taken(task.task_id)
        slot: list[Any] = [None, None, None]  # index, new segment name, or ordinary memory

        def buffer_for(nbytes: int) -> memoryview:
            end_if_stray()
            try:
                index, buffer, name = self.slots.acquire(
                    nbytes, self._wait_for_parent, self._dropped, self._cramped
                )
            except NoRoom:  # the parent waits for it: ordinary memory, sent through the pipe
                slot[2] = bytearray(nbytes)
                return memoryview(slot[2])
            slot[:2] = [index, name]
            return buffer

        skips = np.frombuffer(task.skips, np.int64) if task.skips is not None else None
        piece = self.runner.run(
            task.epoch,
            np.frombuffer(task.indices, np.int64),
            skips,
            stacker=lambda elements, describe: write_stacked(elements, buffer_for, describe),
            placer=lambda batch: write_batch(batch, buffer_for),
            rows_for=lambda rows, describe: StackedRows(rows, buffer_for, describe),
        )
        payload, elements = self._payload(piece.payload, slot, buffer_for)
        return Answer(
            task.task_id,
            payload,
            piece.size,
            piece.units,
            piece.outs,
            piece.last,
            piece.final,
            slot[0],
            slot[1],
            [error_fields(e) for e in piece.skipped],
            self.clock.drain(),
            elements,
        )

    @staticmethod
    def _payload(payload: Any, slot: list[Any], buffer_for: Any) -> tuple[Any, bool]:
        """What the answer carries: a batch's layout in its slot, or the batch itself where it
        was written into ordinary memory (it goes through the pipe); unbatched elements in a
        slot where they fit (`elements` True), else as they are."""
        from tpufeed.errors import WorkerError
        from tpufeed.run.workers.layout import read_batch, write_elements

        if slot[2] is not None:
            return read_batch(payload, slot[2], copy=False), False
        if slot[0] is None and type(payload) is list and payload:  # unbatched: sent unstacked
            try:
                layout = write_elements(payload, buffer_for)
            except WorkerError:  # no room in /dev/shm for them: they go through the pipe
                layout = None
            if layout is not None and slot[2] is None:
                return layout, True
        return payload, False

    def _cramped(self, nbytes: int) -> bool:
        """Whether the batch waiting for room goes through the pipe instead: the parent says
        so (`Spill`) once it is told (`Cramped`, once a task) and finds that room will not
        come while it waits."""
        if not self.asked:
            self.asked = True
            self._send(Cramped(self.task_id, nbytes))
        return self.spill

    def _dropped(self, slots: list[int]) -> None:
        self._send(Dropped(slots))

    def _wait_for_parent(self) -> None:
        """Takes the parent's next message: freed slots and releases count now, a task waits."""
        message = self._receive()
        if isinstance(message, Stop):
            raise WorkerStopped("tpufeed worker told to stop while it waited for a free slot")
        if message is not None:
            self.backlog.append(message)


def _observed(task: Task, answer: Answer, started: float) -> Answer:
    """`answer` with what this worker counted and recorded since its last one, the task's own
    span (`chunk`, from receiving it to its answer made) last."""
    if timeline.recording() is not None:
        args = {"task": task.task_id, "records": len(task.indices) // 8, "epoch": task.epoch}
        timeline.complete("chunk", time.perf_counter() - started, "chunk", args)
    observed = shipping.pack()
    return answer._replace(observed=observed) if observed else answer


class WorkerStopped(Stopped):
    """SIGTERM, raised wherever the worker is (a transform included, which must not take it
    for its own failure): the worker ends cleanly, its shared memory unlinked."""


_STOPPED: list[bool] = []  # SIGTERM came: one raised where it was swallowed ends the worker


def _stop(*_: object) -> None:
    _STOPPED.append(True)
    raise WorkerStopped("tpufeed worker stopped by SIGTERM")


def _unraisable(args: Any) -> None:
    """`sys.unraisablehook`: SIGTERM that came while a finalizer (`__del__`) ran is swallowed
    there, and Python would print it as "Exception ignored"; the worker ends before its next
    task instead (`Worker.run`), quietly. Anything else is printed as Python does."""
    if not isinstance(args.exc_value, WorkerStopped):
        sys.__unraisablehook__(args)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _stop)
    sys.unraisablehook = _unraisable
    _exit_with_parent(int(argv[2]))
    forget_blas_default()  # a fresh interpreter's: numpy has loaded (a forked one has the user's)
    tasks, results = Connection(int(argv[0])), Connection(int(argv[1]))
    worker = None
    try:
        _, start = decode(tasks.recv_bytes())
        assert isinstance(start, Start)
        sys.path[:] = start.sys_path
        import cloudpickle

        init = {**cloudpickle.loads(start.payload), "index": start.index}
        worker = Worker(tasks, results, init, int(argv[3]))
        worker.run()
    except (EOFError, BrokenPipeError, KeyboardInterrupt, WorkerStopped):
        pass  # the parent went away, or stopped the worker
    except Exception as exc:  # noqa: BLE001 - start-up failure, e.g. a function that won't unpickle
        try:
            results.send_bytes(pickle.dumps(Failure(-1, error_fields(exc))))
        except (BrokenPipeError, OSError):
            pass
    finally:
        end_if_stray()  # never a child a transform forked: the worker's files are the worker's
        if worker is not None:
            worker.slots.unlink_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
