"""The environment worker processes (and the fork server) start with: the user's, with numpy's
BLAS on one thread unless the user chose a count."""

from __future__ import annotations

import os

# Read by OpenBLAS (numpy's BLAS) when it loads, in this order; the first one set wins.
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
BLAS_DEFAULTED = "TPUFEED_BLAS_DEFAULTED"  # set beside the default, which a worker then removes


def worker_environment() -> dict[str, str]:
    """The environment a worker process (or the fork server) starts with: this process's, with
    numpy's BLAS on one thread unless the user chose a count.

    OpenBLAS starts a thread per core but one when numpy loads, and each spins ~50 ms of CPU
    before it sleeps: on 2 cores, the fork server's import of numpy took half the parent's core
    while the server started (the parent waited 52-58 ms on its run queue in its first 60
    batches of W1, against none without workers). One BLAS thread per worker is also what N
    workers on N cores want (PyTorch's DataLoader workers limit their own threads the same way).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if not any(name in env for name in _BLAS_THREADS):
        env["OPENBLAS_NUM_THREADS"] = "1"
        env[BLAS_DEFAULTED] = "1"
    return env


def forget_blas_default() -> None:
    """Removes the default `worker_environment` set, once numpy has loaded: the environment a
    worker's transforms (and the processes they start) see is the user's."""
    if os.environ.pop(BLAS_DEFAULTED, None) is not None:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
