"""CI: PyTorch on TPU, as torch_xla runs it on the CPU: torch 2.9 and torch_xla 2.9 from PyPI.

A venv of its own holds `torch==2.9.0` and `torch_xla==2.9.0` (torch_xla's newest release, which
runs only with its own torch) from PyPI alone, and `tpufeed[torch]` beside them, which must leave
both where they are. Then, with `PJRT_DEVICE=CPU`, `tests/adapters/test_torch_xla.py` trains
through torch_xla's `MpDeviceLoader`: several epochs, a checkpoint mid-epoch, an exact resume.
Where the wheels cannot be had the group fails, saying so; a skip fails it too.

    python .ci/xla.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lowest  # .ci/lowest.py: how a venv is made and tested

STACK = {"torch": "2.9.0", "torch-xla": "2.9.0"}  # the user's, from PyPI: must stay so
GROUP = lowest.Group(
    "xla",
    ("torch",),
    ("tests/adapters/test_torch_xla.py",),
    beside=tuple(f"{name}=={version}" for name, version in STACK.items()),
)


def main() -> int:
    os.environ["PJRT_DEVICE"] = "CPU"  # XLA's CPU device; torch_xla reads it on import
    project = tomllib.loads((lowest.ROOT / "pyproject.toml").read_text())["project"]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xla-") as scratch:
        venv = Path(scratch) / "venv"
        try:  # tpufeed[torch] beside the user's torch and torch_xla, from PyPI alone
            versions = lowest.install(GROUP, venv, project, resolution="highest")
        except subprocess.CalledProcessError as error:
            print(f"FAILED [xla]: the wheels could not be had: {' '.join(error.cmd)}")
            return 1
        moved = [
            f"{n} {v} became {versions.get(n)}" for n, v in STACK.items() if versions.get(n) != v
        ]
        print(f"[xla] torch {versions.get('torch')}, torch-xla {versions.get('torch-xla')}")
        problems, passed, failed = lowest.smoke(GROUP, venv)
    print(f"  {time.monotonic() - start:.0f} s", flush=True)
    for problem in moved + problems:
        print(f"FAILED [xla]: {problem}")
    print(f"xla: {passed} passed, {failed + len(moved)} failed")
    return 1 if moved or problems else 0


if __name__ == "__main__":
    sys.exit(main())
