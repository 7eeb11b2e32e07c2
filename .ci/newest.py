"""CI: every extra at the newest releases a fresh install gets today, each in a venv of its own.

The groups of `.ci/lowest.py`, resolved the other way: `uv pip install -e ".[extra]"` from PyPI
alone (no local wheel folder or index), everything at its newest, the test tools too. The script
checks that each of the extra's own requirements landed on the newest release this Python can
install (`pip index versions`, pip's local configuration off): one held lower means something
in the extra caps it, so a user's newer copy would be downgraded. Then it runs the group's
smoke tests, refusing skips. The `all` group installs `tpufeed[all]` whole, with the test tools
of every group inside it, and those groups run their tests in that one venv (their
requirements are at the newest there too, or `all` would fail); the others (Beam, TensorFlow,
OpenCV, a user's opencv-python) get venvs of their own. What is newer than the tested set
(constraints/ci.txt) is printed: protobuf 7 against the tested 6, say.

    python .ci/newest.py                  # every group
    python .ci/newest.py all torch        # some
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from functools import cache
from pathlib import Path

import tomllib
from packaging.utils import canonicalize_name
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lowest  # .ci/lowest.py: the groups, and how a venv is made and tested

ROOT = lowest.ROOT
# `tpufeed[all]` whole; the user who has `opencv-python` (not -headless) keeps it
ALL = lowest.Group("all", ("all",), ("tests/cli/test_bench_plot.py",))
GROUPS = tuple(g for g in lowest.GROUPS if g.name != "all") + (
    ALL,
    lowest.Group(
        "opencv-python",
        ("images",),
        ("tests/transforms/test_crops.py", "-k", "not in_a_build"),
        tools=("scipy", "scikit-learn"),
        beside=("opencv-python",),
    ),
)
NOT_OURS = {"opencv-python": "opencv-python-headless"}  # beside: must not be installed over it


@cache
def newest(name: str) -> Version | None:
    """The newest release of `name` that this Python can install from PyPI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    found = re.search(r"\(([^)]+)\)", listing)
    return Version(found.group(1)) if found else None


def requirements(project: dict, group: lowest.Group) -> list:
    """The group's own requirements; for an extra that names others (`all`), theirs too, and
    for `all` tpufeed's own (a cap anywhere in it on numpy or protobuf would hold them)."""
    extras = set(group.extras)
    todo = list(group.extras)
    while todo:
        for line in project["optional-dependencies"][todo.pop()]:
            if line.startswith(f"{project['name']}["):
                new = set(line[line.index("[") + 1 : line.index("]")].split(",")) - extras
                extras |= new
                todo += sorted(new)
    found = lowest.own_requirements(project, replace(group, extras=tuple(sorted(extras))))
    if group.name == "all":
        found += lowest.own_requirements(project, replace(group, extras=()))
    return found


def held_back(project: dict, group: lowest.Group, versions: dict[str, str]) -> list[str]:
    """The group's requirements installed below the newest release, as sentences."""
    found = []
    for requirement in requirements(project, group):
        name = canonicalize_name(requirement.name)
        got, latest = versions.get(name), newest(name)
        if latest is not None and (got is None or Version(got) < latest):
            found.append(f"{name} installed as {got}, {latest} is out: something caps it")
    for mine, theirs in NOT_OURS.items():
        if mine in group.beside and theirs in versions:
            found.append(f"{theirs} installed over the user's {mine}")
    return found


def host(project: dict, group: lowest.Group) -> str:
    """The group whose venv runs `group`'s tests: `all` where its extras are inside `all` and it
    needs nothing beside them; itself otherwise."""
    if set(group.extras) <= _all_extras(project) and not group.also and not group.beside:
        return "all"
    return group.name


def _all_extras(project: dict) -> set[str]:
    line = next(x for x in project["optional-dependencies"]["all"] if x.startswith("tpufeed["))
    return set(line[line.index("[") + 1 : line.index("]")].split(","))


def newer_than_tested(versions: dict[str, str]) -> str:
    ci = {k: Version(v.split("==")[1]) for k, v in lowest.pins(lowest.CI_PINS).items()}
    newer = [
        f"{n} {v} (tested {ci[n]})"
        for n, v in sorted(versions.items())
        if n in ci and Version(v).release > ci[n].release
    ]
    return ", ".join(newer) or "nothing"


def main(names: list[str]) -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if shutil.which("uv") is None:
        sys.exit("uv is not installed; it is in the dev extra: pip install -e '.[dev]'")
    unknown = set(names) - {group.name for group in GROUPS}
    if unknown:
        sys.exit(f"no group {sorted(unknown)}; the groups: {[g.name for g in GROUPS]}")
    failed: dict[str, list[str]] = {}
    tests = {"passed": 0, "failed": 0}
    chosen = [g for g in GROUPS if not names or g.name in names]
    hosts: dict[str, list[lowest.Group]] = {}
    for group in chosen:
        hosts.setdefault(host(project, group), []).append(group)
    for name, guests in hosts.items():
        start = time.monotonic()
        venv_group = next(g for g in GROUPS if g.name == name)
        tools = tuple(dict.fromkeys(t for g in guests for t in g.tools))
        venv_group = replace(venv_group, tools=tools)
        with tempfile.TemporaryDirectory(prefix=f"newest-{name}-") as scratch:
            venv = Path(scratch) / "venv"
            try:
                versions = lowest.install(venv_group, venv, project, resolution="highest")
            except subprocess.CalledProcessError as error:  # uv said why, above
                failed[name] = [f"the install failed: {' '.join(error.cmd)}"]
                tests["failed"] += 1
                continue
            print(f"[{name} venv] newer than constraints/ci.txt: {newer_than_tested(versions)}")
            for group in guests:
                direct = ", ".join(
                    f"{r.name} {versions.get(canonicalize_name(r.name))}"
                    for r in requirements(project, group)
                )
                print(f"[{group.name}] {direct}", flush=True)
                problems, passed, failing = lowest.smoke(group, venv)
                problems = held_back(project, group, versions) + problems
                tests["passed"] += passed
                tests["failed"] += failing
                if problems:
                    failed[group.name] = problems
        print(f"  {time.monotonic() - start:.0f} s", flush=True)
    for name, problems in failed.items():
        print(f"FAILED [{name}]:", *problems, sep="\n  ")
    print(f"newest: {tests['passed']} passed, {tests['failed']} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
