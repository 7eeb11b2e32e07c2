"""Prints constraints/ci.txt: every distribution that `tpufeed[all,dev]` pulls, at its installed version.

Run it in the environment the full suite passed in (CONTRIBUTING.md, "The tested set"):

    python constraints/freeze.py > constraints/ci.txt

Unlike `pip freeze`, it lists only what tpufeed's extras reach, following each requirement's
markers and extras, so a tool installed by hand next to tpufeed does not become a pin.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRAS = ("all", "dev")
HEADER = """\
# The tested set: every distribution that tpufeed[all,dev] pulls, at the version CI tests, on
# Python 3.11 (other Pythons install the README's quickstart line without it: .ci/pythons.py).
# pip install -e ".[all,dev]" -c constraints/ci.txt   (README, .ci/run, the benchmarks)
# Every pin is a release on PyPI as written (.ci/fresh.py resolves it there): torch==2.13.0 takes
# PyPI's build (CUDA on Linux x86_64) or a CPU wheel of 2.13.0 where pip finds one (+cpu).
# Made by `python constraints/freeze.py > constraints/ci.txt` (CONTRIBUTING.md, "The tested set").
"""


def wanted(requirement: Requirement, extras: set[str]) -> bool:
    """Whether `requirement` applies with these extras requested, on this machine."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def own_requirements(project: dict, extras: tuple[str, ...]) -> list[Requirement]:
    """The requirements of tpufeed with `extras`, read from pyproject.toml (not from an
    installed tpufeed's metadata, which may be older), its extras naming extras expanded."""
    name, optional = project["name"], project["optional-dependencies"]
    found = [Requirement(line) for line in project["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in map(Requirement, optional[extra]):
            if canonicalize_name(requirement.name) == name:
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def closure(roots: list[Requirement]) -> dict[str, str]:
    """{name: installed version} of every distribution that `roots` reach."""
    found: dict[str, str] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo = [requirement for requirement in roots if wanted(requirement, set())]
    while todo:
        requirement = todo.pop()
        name, extras = canonicalize_name(requirement.name), set(requirement.extras)
        if (name, frozenset(extras)) in done:
            continue
        done.add((name, frozenset(extras)))
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sys.exit(f"{requirement} is required but {name} is not installed")
        found[name] = Version(distribution.version).public  # 2.13.0+cpu: PyPI has 2.13.0
        for line in distribution.requires or []:
            needed = Requirement(line)
            if wanted(needed, extras):
                needed.marker = None
                todo.append(needed)
    return found


def main() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    pins = closure(own_requirements(project, EXTRAS))
    sys.stdout.write(HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))


if __name__ == "__main__":
    main()
