"""The command Beam's runner starts for each worker process of `tpufeed build --workers N`
when the build started its workers early (`warm_workers`). Run as a script with `python -S`,
it imports nothing but the standard library.

It takes one of the started workers (a folder entry made atomically), connects to its socket,
sends its own environment (the runner's addresses and the pipeline options that Beam sets for
the worker command) and ends with the exit status the worker sends back when its harness
returns; a worker that dies closes the connection, and the shim then ends with status 1, as a
worker process that failed. Where no started worker is left or answers, the shim becomes a
worker process itself, started cold.

    python -S worker_shim.py FOLDER WORKERS LEVEL
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

__all__ = ["main"]


def _handed_to(folder: str, slot: int) -> int | None:
    """The exit status of the started worker `slot`, run with this process's environment;
    None where that worker is taken or not there."""
    try:
        os.mkdir(os.path.join(folder, f"taken.{slot}"))
    except OSError:  # taken by another shim, or the build removed the folder
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(os.path.join(folder, f"worker.{slot}"))
    except OSError:  # it ended before taking work
        connection.close()
        return None
    with connection:
        connection.sendall(json.dumps(dict(os.environ)).encode())
        connection.shutdown(socket.SHUT_WR)
        status = b""
        while chunk := connection.recv(64):
            status += chunk
    return int(status) if status.strip().isdigit() else 1


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group; the build process reports it in one line.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    folder, workers, level = argv[1], int(argv[2]), argv[3]
    for slot in range(workers):
        status = _handed_to(folder, slot)
        if status is not None:
            return status
    cold = [sys.executable, "-m", "tpufeed.beam.workers.worker_process", level]
    os.execv(sys.executable, cold)  # replaces this process: the runner waits for that one
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
