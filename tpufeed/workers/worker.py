"""A worker process: `python -m tpufeed.workers.worker TASK_FD RESULT_FD`.

Started as a fresh interpreter (not forked, and without re-importing the user's `__main__`, so a
script's top-level `jax.distributed.initialize()` never runs twice). It receives the pipeline
once, then tasks: record indices to read, transform and stack into a shared-memory slot.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

# Messages, parent -> worker: ("task", task_id, epoch, indices bytes) | ("free", slot) | ("stop",)
# worker -> parent: ("ready",) | ("batch", task_id, slot, new_segment, layout, offsets, skipped,
#                    times) | ("items", task_id, elements, offsets, skipped, times)
#                 | ("error", task_id, error fields)


def _exit_with_parent() -> None:
    """Ask Linux to SIGTERM us when the parent dies, so no worker outlives it."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def error_fields(exc: BaseException) -> dict[str, Any]:
    from tpufeed.errors import TransformError
    tb = getattr(exc, "traceback_text", None) or "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = str(exc)
    if isinstance(exc, TransformError):
        message = message.split("\n", 1)[0]
    return {"type": type(exc).__name__, "message": message, "record": getattr(exc, "record", None),
            "path": getattr(exc, "path", None), "traceback": tb}


class Worker:
    def __init__(self, tasks: Connection, results: Connection, init: dict[str, Any]):
        from tpufeed.stats import StageClock
        from tpufeed.workers.slots import WorkerSlots
        from tpufeed.workers.task import TaskRunner

        self.tasks, self.results = tasks, results
        self.index = init["index"]
        self.slots = WorkerSlots(f"{init['prefix']}-w{self.index}", init["slots"])
        self.clock = StageClock()
        self.runner = TaskRunner(init["plan"], init["batched"], init["whole_batches"], self.clock)
        self.backlog: deque = deque()

    def run(self) -> None:
        import numpy as np

        self.results.send(("ready",))
        while True:
            message = self.backlog.popleft() if self.backlog else self.tasks.recv()
            kind = message[0]
            if kind == "stop":
                return
            if kind == "free":
                self.slots.release(message[1])
                continue
            _, task_id, epoch, raw = message
            try:
                self.results.send(self._task(task_id, epoch, np.frombuffer(raw, np.int64)))
            except Exception as exc:  # noqa: BLE001 - every failure goes to the parent
                self.results.send(("error", task_id, error_fields(exc)))

    def _task(self, task_id: int, epoch: int, indices: Any) -> tuple:
        from tpufeed.workers.layout import write_batch, write_stacked

        slot: list[Any] = [None, None]

        def buffer_for(nbytes: int) -> memoryview:
            while not self.slots.has_free:
                self._wait_for_free_slot()
            index, buffer, name = self.slots.acquire(nbytes)
            slot[:] = [index, name]
            return buffer

        kind, payload, offsets = self.runner.run(
            indices, epoch,
            stacker=lambda elements, describe: write_stacked(elements, buffer_for, describe),
            placer=lambda batch: write_batch(batch, buffer_for))
        skipped = [error_fields(error) for error in self.runner.take_skipped()]
        if kind == "items":
            return ("items", task_id, payload, offsets, skipped, self.clock.drain())
        return ("batch", task_id, slot[0], slot[1], payload, offsets, skipped, self.clock.drain())

    def _wait_for_free_slot(self) -> None:
        message = self.tasks.recv()
        if message[0] == "free":
            self.slots.release(message[1])
        elif message[0] == "stop":
            raise SystemExit(0)
        else:
            self.backlog.append(message)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _exit_with_parent()
    tasks, results = Connection(int(argv[0])), Connection(int(argv[1]))
    worker = None
    try:
        sys_path, payload = tasks.recv()
        sys.path[:] = sys_path
        import cloudpickle
        init = cloudpickle.loads(payload)
        worker = Worker(tasks, results, init)
        worker.run()
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent went away
    except Exception as exc:  # noqa: BLE001 - start-up failure, e.g. a function that won't unpickle
        try:
            results.send(("error", -1, error_fields(exc)))
        except (BrokenPipeError, OSError):
            pass
    finally:
        if worker is not None:
            worker.slots.unlink_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
