"""Installs `tpufeed[all]` next to a user's own stack and checks that it changes none of it.

The user's stack: torch 2.15 (the PyPI build), `tensorflow` (not `-cpu`) and the newest jax this
Python can install, put into a fresh virtual environment first. Then `tpufeed[all]` from this
checkout goes in, and the check fails if torch, TensorFlow or jax changed version, if a second
TensorFlow distribution appeared, or if `tpufeed quickstart` fails. It downloads several GB
(torch's CUDA libraries), so CI does not run it; its output goes in the notes of a release.

    python scripts/check_user_stack.py                  # a venv in a temporary folder
    python scripts/check_user_stack.py --venv /tmp/us   # kept, to look into afterwards
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_STACK = ("torch==2.15.*", "tensorflow", "jax")
KEPT = ("torch", "tensorflow", "jax", "jaxlib")  # the user's: must not move
# Distributions that install the same `tensorflow` package: two of them overwrite each other.
TENSORFLOWS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-intel", "tf-nightly")


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def installed(python: str) -> dict[str, str]:
    """{normalised name: version} of the venv's distributions."""
    listing = run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    pairs = (line.split("==", 1) for line in listing.stdout.splitlines() if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def problems(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What installing tpufeed did to the user's stack, as sentences; empty when nothing."""
    found = [
        f"{name} {before[name]} became {after.get(name, 'uninstalled')}"
        for name in KEPT
        if name in before and after.get(name) != before[name]
    ]
    found += [f"{name} missing before tpufeed went in" for name in KEPT if name not in before]
    tensorflows = sorted(name for name in TENSORFLOWS if name in after)
    if len(tensorflows) > 1:
        found.append(f"two TensorFlow distributions: {', '.join(tensorflows)}")
    return found


def check(venv: Path) -> list[str]:
    # pip as a user has it: no machine-wide configuration (CI's machines cap torch to the wheels
    # on their disk, which would refuse torch 2.15), no local wheel folders or indexes.
    os.environ["PIP_CONFIG_FILE"] = os.devnull
    for name in ("PIP_CONSTRAINT", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
        os.environ.pop(name, None)
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--upgrade", "pip"])
    start = time.monotonic()
    run([python, "-m", "pip", "install", *USER_STACK])
    print(f"user stack installed in {time.monotonic() - start:.0f} s", flush=True)
    before = installed(python)
    start = time.monotonic()
    run([python, "-m", "pip", "install", f"{ROOT}[all]"])
    print(f"tpufeed[all] installed in {time.monotonic() - start:.0f} s", flush=True)
    after = installed(python)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            print(f"  {name}: {before.get(name, '-')} -> {after.get(name, '-')}")
    subprocess.run([python, "-m", "pip", "check"])  # printed, not judged: not ours to fix
    found = problems(before, after)
    with tempfile.TemporaryDirectory() as scratch:
        quickstart = subprocess.run([str(venv / "bin" / "tpufeed"), "quickstart"], cwd=scratch)
    if quickstart.returncode:
        found.append(f"tpufeed quickstart exited {quickstart.returncode}")
    print("stack:", ", ".join(f"{name} {after.get(name, '-')}" for name in KEPT), flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--venv", type=Path, help="where to make the venv (default: a temporary one)"
    )
    args = parser.parse_args()
    scratch = None if args.venv else Path(tempfile.mkdtemp(prefix="tpufeed-user-stack-"))
    try:
        found = check(args.venv or scratch / "venv")
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    for problem in found:
        print("FAILED:", problem)
    if not found:
        print("OK: tpufeed[all] kept torch, tensorflow and jax, and the quickstart ran")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
