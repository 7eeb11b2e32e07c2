"""Every benchmark measures tpufeed as an installed package runs: from compiled bytecode.

pip compiles an installed package's modules once (`.pyc` files), so Grain, torch and TensorFlow
are imported from bytecode. A source checkout run with PYTHONDONTWRITEBYTECODE set (as some
sandboxes and containers do) compiles tpufeed's ~100 modules again in every process: ~80 ms of
CPU before the first batch, paid again by the fork server, so the workers start ~0.1 s later in
the very window the "first 50k records" column measures. Compiling them first puts every row
on the same footing; it is a no-op when the bytecode is fresh.
"""

from __future__ import annotations

import compileall
import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("tpufeed", "transforms", "benchmarks")  # transforms: installed as tpufeed.transforms


def compile_sources(root: str = _ROOT) -> bool:
    """Writes the bytecode of tpufeed and the benchmarks under `root` where it is missing or
    stale; False if some module could not be compiled or written (a read-only checkout)."""
    ok = True
    for package in PACKAGES:
        folder = os.path.join(root, package)
        if os.path.isdir(folder):
            ok = bool(compileall.compile_dir(folder, quiet=2)) and ok
    return ok
