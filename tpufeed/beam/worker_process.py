"""Entry point of a `tpufeed build --workers N` worker process: Beam's SDK harness, with its
own start-up lines dropped and tpufeed's progress lines kept at the caller's level.

    python -m tpufeed.beam.worker_process INFO
"""

from __future__ import annotations

import logging
import os
import signal
import sys

__all__ = ["command", "main"]


def command(level: int) -> str:
    """The shell command Beam runs to start one worker process."""
    return f"{sys.executable} -m tpufeed.beam.worker_process {logging.getLevelName(level)}"


def main(argv: list[str]) -> None:
    # Ctrl-C in a terminal reaches every process of its group, and the parent reports the
    # stopped build in one line: a worker ends at once, without printing its threads' stacks.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    level = logging.getLevelName(argv[1]) if len(argv) > 1 else logging.INFO
    level = level if isinstance(level, int) else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tpufeed: %(message)s"))
    # Beam's warnings here are about its start-up (no BigQuery client, no cache folder); a
    # failed step is reported by the runner in the parent process.
    handler.addFilter(
        lambda record: (
            record.levelno >= (level if record.name.startswith("tpufeed") else logging.ERROR)
        )
    )
    # Installed before Beam configures logging, so that its default handler is not added.
    logging.getLogger().addHandler(handler)
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(argv)
    # The runner closed this worker's control stream: its work is done and delivered. The
    # interpreter's shutdown (gRPC's threads, every module torn down) would take ~0.3 s, which
    # the runner waits for one worker after another: end the process here instead.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
