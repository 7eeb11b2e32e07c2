"""Entry point of a `tpufeed build --workers N` worker process: Beam's SDK harness, with its
own start-up lines dropped and tpufeed's progress lines kept at the caller's level.

    python -m tpufeed.beam.workers.worker_process INFO                       # started by the runner
    python -m tpufeed.beam.workers.worker_process INFO --warm FOLDER SLOT    # started early

A worker started early (`warm_workers`) imports the harness and the build's steps at once,
listens on `FOLDER/worker.SLOT`, and runs when the runner's command (`worker_shim`) sends it
the environment the runner made for it; it sends back its exit status. It ends when the build
process that started it closes its stdin, whether it ran or not.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shlex
import signal
import socket
import sys
import threading

__all__ = ["argv", "command", "main"]

_STEPS = ("tpufeed.beam.read.block_reader", "tpufeed.beam.write.shard_chunks")  # the build's steps


def argv(level: int) -> list[str]:
    """The command line of one worker process, its log level `level`."""
    return [
        sys.executable,
        "-m",
        "tpufeed.beam.workers.worker_process",
        logging.getLevelName(level),
    ]


_STEP_FAILURE_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker")


def command(level: int) -> str:
    """The shell command Beam runs to start one worker process."""
    return shlex.join(argv(level))


def main(argv: list[str]) -> None:
    # Ctrl-C in a terminal reaches every process of its group, and the parent reports the
    # stopped build in one line: a worker ends at once, without printing its threads' stacks.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    level = logging.getLevelName(argv[1]) if len(argv) > 1 else logging.INFO
    level = level if isinstance(level, int) else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tpufeed: %(message)s"))
    # Beam's warnings here are about its start-up (no BigQuery client, no cache folder); a
    # failed step is reported by the runner in the parent process, which raises its error in
    # one line: the step's own logs of it (its traceback, twice) are not printed here.
    handler.addFilter(
        lambda record: (
            record.levelno >= (level if record.name.startswith("tpufeed") else logging.ERROR)
            and not record.name.startswith(_STEP_FAILURE_LOGGERS)
        )
    )
    # Installed before Beam configures logging, so that its default handler is not added.
    logging.getLogger().addHandler(handler)
    if len(argv) == 5 and argv[2] == "--warm":
        _run_when_asked(argv[3], int(argv[4]))
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(argv)
    _end(0)


def _end(status: int) -> None:
    """Ends the process at once. The runner closed this worker's control stream: its work is
    done and delivered. The interpreter's shutdown (gRPC's threads, every module torn down)
    would take ~0.3 s, which the runner waits for one worker after another."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _end_with_build() -> None:
    """Ends this process when the build process that started it closes its stdin or dies."""
    sys.stdin.buffer.read()
    os._exit(1)


def _run_when_asked(folder: str, slot: int) -> None:
    """Imports what a worker runs, waits for the runner's environment on this slot's socket,
    runs the harness with it and sends back its exit status."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(folder, f"worker.{slot}"))
    listener.listen(1)
    threading.Thread(target=_end_with_build, daemon=True).start()
    from apache_beam.runners.worker import sdk_worker_main

    for module in _STEPS:  # imported ahead, while nothing waits for this worker
        importlib.import_module(module)

    connection, _ = listener.accept()
    listener.close()
    data = b""
    while chunk := connection.recv(1 << 16):
        data += chunk
    os.environ.clear()
    os.environ.update(json.loads(data))
    status = 1
    try:
        sdk_worker_main.main([])
        status = 0
    finally:
        connection.sendall(str(status).encode())
        connection.close()
        _end(status)


if __name__ == "__main__":
    main(sys.argv)
