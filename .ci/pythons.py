"""CI: the README's quickstart line on every Python that pyproject.toml declares but the suite's.

The suite runs on this machine's Python (3.11, which constraints/ci.txt serves). For each other
declared Python, a venv of its own takes `tpufeed[quickstart]` from PyPI alone, at the newest
releases that Python can install, and runs `tpufeed quickstart` and the base smoke tests.
A declared Python that is not on the machine fails the group: a version is declared only where
it is tested (pyproject's classifiers and requires-python list `TESTED`).

    python .ci/pythons.py            # every declared Python but this one
    python .ci/pythons.py 3.12       # one
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lowest  # .ci/lowest.py: how a venv is made and tested

TESTED = (
    10,
    11,
    12,
    13,
)  # 3.x minors: pyproject's classifiers (tests/repository/test_dependencies.py)
TESTS = ("tests/test_codec.py", "tests/test_dataset.py")


def interpreter(minor: int) -> str | None:
    """A python3.`minor` on this machine (on PATH, or one pyenv built), or None."""
    found = [shutil.which(f"python3.{minor}")]
    found += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3")))
    for path in filter(None, found):
        probe = [path, "-c", "import sys; print(sys.version_info[:2])"]
        if subprocess.run(probe, capture_output=True, text=True).stdout.strip() == f"(3, {minor})":
            return path
    return None


def check(minor: int) -> list[str]:
    """Installs tpufeed[quickstart] on Python 3.`minor` and runs it; the problems found."""
    python = interpreter(minor)
    if python is None:
        return [f"no Python 3.{minor} here, which pyproject.toml declares: install it or drop it"]
    with tempfile.TemporaryDirectory(prefix=f"python3{minor}-") as scratch:
        venv = Path(scratch) / "venv"
        env = {**os.environ, "VIRTUAL_ENV": str(venv)}
        subprocess.run(["uv", "venv", "-q", "--python", python, str(venv)], check=True)
        command = ["uv", "pip", "install", "-q", "--no-config", "-e", f"{lowest.ROOT}[quickstart]"]
        try:
            subprocess.run([*command, *lowest.TEST_TOOLS], check=True, env=env)
        except subprocess.CalledProcessError:
            return [f"pip install -e '.[quickstart]' fails on Python 3.{minor}"]
        frozen = subprocess.run(
            ["uv", "pip", "freeze"], env=env, capture_output=True, text=True
        ).stdout
        shown = [line for line in frozen.splitlines() if line.split("==")[0] in ("jax", "numpy")]
        print(f"[3.{minor}] {python}: {', '.join(shown)}", flush=True)
        quickstart = [str(venv / "bin" / "tpufeed"), "quickstart", "--epochs", "2"]
        ran = subprocess.run(
            [*quickstart, "--output", str(Path(scratch) / "qs")],
            capture_output=True,
            text=True,
            env={**env, "JAX_PLATFORMS": "cpu"},
        )
        print(f"  tpufeed quickstart: {(ran.stdout.strip().splitlines() or ['(nothing)'])[-1]}")
        problems = []
        if ran.returncode != 0:
            print(ran.stdout[-3000:], ran.stderr[-3000:], sep="\n")
            problems.append(f"tpufeed quickstart exits {ran.returncode} on Python 3.{minor}")
        group = lowest.Group(f"3.{minor}", ("quickstart",), TESTS)
        smoke_problems, _, _ = lowest.smoke(group, venv)
        return problems + smoke_problems


def main(names: list[str]) -> int:
    mine = sys.version_info.minor
    minors = [int(n.split(".")[1]) for n in names] or [m for m in TESTED if m != mine]
    failed = {}
    for minor in minors:
        start = time.monotonic()
        problems = check(minor)
        print(f"  {time.monotonic() - start:.0f} s", flush=True)
        if problems:
            failed[minor] = problems
    for minor, problems in failed.items():
        print(f"FAILED [3.{minor}]:", *problems, sep="\n  ")
    print(f"pythons: {len(minors) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
