"""pyproject.toml's requirements install next to a user's stack; constraints/ci.txt is what CI tests.

Floors only, a cap only with its reason on its line, no TensorFlow distribution in an extra,
every extra proved at its floors by `.ci/lowest.py`, and the tested set (constraints/ci.txt:
the CPU torch wheel) used by CI, the README and the benchmarks.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tpufeed.adapters._tensorflow import TENSORFLOW_FLOOR

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "pyproject.toml").read_text()
PYPROJECT = tomllib.loads(TEXT)
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
USERS = {"": PROJECT["dependencies"]} | {k: v for k, v in EXTRAS.items() if k != "dev"}
CAPS = ("<", "<=", "~=", "==", "===", "!=")
TENSORFLOWS = {"tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-intel", "tf-nightly"}


def line_of(requirement: str) -> str:
    """The line of pyproject.toml that holds `requirement` (its comment included)."""
    return next(line for line in TEXT.splitlines() if f'"{requirement}"' in line)


def ci_pins() -> dict[str, Version]:
    text = (ROOT / "constraints" / "ci.txt").read_text()
    pairs = (line.split("==") for line in text.splitlines() if line and not line.startswith("#"))
    return {canonicalize_name(name): Version(version) for name, version in pairs}


@functools.cache
def script(path: str):
    """A script of the repository (not a module of a package), loaded as a module."""
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def lowest_groups():
    return script(".ci/lowest.py").GROUPS


@pytest.mark.parametrize("extra", sorted(USERS))
def test_a_users_requirement_has_a_floor_and_a_cap_only_with_its_reason(extra):
    for line in USERS[extra]:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == PROJECT["name"]:
            continue
        operators = {spec.operator for spec in requirement.specifier}
        assert ">=" in operators, f"{line!r} in [{extra}] has no floor (>=)"
        assert not operators & {"==", "==="}, f"{line!r} in [{extra}] pins an exact version"
        if operators & set(CAPS):
            assert "#" in line_of(line), f"{line!r} caps without a comment giving the known break"


def test_no_extra_names_a_tensorflow_distribution_that_could_go_over_the_users():
    for extra, lines in USERS.items():
        names = {canonicalize_name(Requirement(line).name) for line in lines}
        assert not names & TENSORFLOWS, f"[{extra}] names {names & TENSORFLOWS}"


def test_the_tests_tensorflow_floor_is_the_one_checked_at_run_time():
    (tests_tf,) = (Requirement(r) for r in EXTRAS["dev"] if Requirement(r).name == "tensorflow-cpu")
    assert str(tests_tf.specifier) == f">={TENSORFLOW_FLOOR}"


def test_every_extra_has_its_smoke_tests_at_its_floors():
    covered = {extra for group in lowest_groups() for extra in group.extras}
    wanted = set(EXTRAS) - {"all", "dev"}
    assert wanted <= covered, f"no group in .ci/lowest.py for {sorted(wanted - covered)}"
    for group in lowest_groups():
        for path in (arg for arg in group.tests if arg.startswith("tests/")):
            assert (ROOT / path.split("::")[0]).is_file(), f"group {group.name} runs {path}"


def test_ci_pins_are_releases_as_written_and_satisfy_every_requirement():
    """No local version (`+cpu`): every pin is a release on PyPI as written, which `.ci/fresh.py`
    resolves there; torch==2.13.0 still takes a local CPU wheel of 2.13.0 where pip finds one."""
    pins = ci_pins()
    assert not [f"{n}=={v}" for n, v in pins.items() if v.local], "a local version in ci.txt"
    every = [line for lines in EXTRAS.values() for line in lines] + PROJECT["dependencies"]
    for requirement in map(Requirement, every):
        name = canonicalize_name(requirement.name)
        if name != PROJECT["name"]:
            assert name in pins, f"{requirement} has no pin in constraints/ci.txt"
            assert requirement.specifier.contains(pins[name], prereleases=True), (
                f"constraints/ci.txt pins {name} {pins[name]}, outside {requirement}"
            )


@pytest.mark.parametrize(
    "path, where",
    [
        (".ci/run", "python -m pip install"),
        ("README.md", "python -m pytest"),
        ("CONTRIBUTING.md", "pip install -e"),
        ("benchmarks/RESULTS.md", "pip install"),
    ],
)
def test_ci_the_readme_and_the_benchmarks_install_the_tested_set(path, where):
    first = next(line for line in (ROOT / path).read_text().splitlines() if where in line)
    assert "-c constraints/ci.txt" in first, f"{path}: {first!r}"


def test_the_readme_starts_with_its_two_commands():
    """The quickstart with only what it needs; the tests with the tested set. `.ci/fresh.py`
    resolves both from plain PyPI, and `.ci/run` runs the second."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    quickstart, tests = block.group(1).splitlines()
    assert quickstart.startswith('pip install -e ".[quickstart]" && tpufeed quickstart')
    assert tests.startswith(
        'pip install -e ".[all,dev]" -c constraints/ci.txt && python -m pytest -q'
    )
    run = (ROOT / ".ci" / "run").read_text()
    assert (
        'python -m pip install -e ".[all,dev]" -c constraints/ci.txt\npython -m pytest -q\n' in run
    )
    resolved = script(".ci/fresh.py").readme_installs((ROOT / "README.md").read_text())
    assert resolved == [["-e", ".[quickstart]"], ["-e", ".[all,dev]", "-c", "constraints/ci.txt"]]


def test_the_quickstart_page_and_command_name_the_quickstart_extra():
    page = (ROOT / "docs" / "quickstart.md").read_text()
    assert '`pip install "tpufeed[quickstart]"`' in page
    assert "tpufeed[quickstart]" in (ROOT / "tpufeed" / "cli" / "quickstart.py").read_text()
    names = {canonicalize_name(Requirement(line).name) for line in EXTRAS["quickstart"]}
    assert names == {"tpufeed", "scikit-learn"}  # jax through tpufeed[jax]


def test_all_takes_every_extra_but_beam_and_opencv():
    """`beam` caps pyarrow, protobuf and numpy below their newest releases: the build runs in an
    environment of its own (docs/offline-build.md). `opencv` would put -headless over a user's
    opencv-python. Every other extra is in `all`."""
    (named,) = [Requirement(r) for r in EXTRAS["all"] if Requirement(r).name == PROJECT["name"]]
    assert named.extras == set(EXTRAS) - {"all", "dev", "beam", "opencv"}


def test_only_the_opencv_extra_names_an_opencv_distribution():
    for extra, lines in USERS.items():
        names = {canonicalize_name(Requirement(line).name) for line in lines}
        found = {n for n in names if n.startswith("opencv-")}
        assert not found or extra == "opencv", f"[{extra}] names {found}: it would go over cv2"


def test_torchdata_is_the_users_and_the_tests():
    """tpufeed never imports torchdata; StatefulDataLoader's users install it."""
    for extra, lines in USERS.items():
        names = {canonicalize_name(Requirement(line).name) for line in lines}
        assert "torchdata" not in names, f"[{extra}] requires torchdata"
    assert "torchdata" in {canonicalize_name(Requirement(r).name) for r in EXTRAS["dev"]}
    code = "\n".join(p.read_text() for p in (ROOT / "tpufeed").rglob("*.py"))
    assert not re.search(r"^\s*(import|from) torchdata", code, re.M)


def test_the_classifiers_and_requires_python_name_the_pythons_ci_runs():
    tested = [f"3.{minor}" for minor in script(".ci/pythons.py").TESTED]
    declared = [
        c.rsplit(" :: ", 1)[1]
        for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert declared == tested
    assert PROJECT["requires-python"] == f">={tested[0]}"


def test_the_wheel_lists_every_package_of_the_checkout():
    """A package missing from pyproject's list installs from a checkout (-e) but not from the
    wheel: `tpufeed.observe` once made `tpufeed quickstart` fail after `pip install tpufeed`."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "tpufeed").rglob("__init__.py")
        if "transforms" not in init.relative_to(ROOT).parts
    }
    assert found | {"tpufeed.transforms"} == listed


def test_the_user_stack_check_names_a_moved_framework_and_a_second_tensorflow():
    problems = script("scripts/check_user_stack.py").problems
    before = {"torch": "2.15.0", "tensorflow": "2.21.0", "jax": "0.10.2", "jaxlib": "0.10.2"}
    assert problems(before, {**before, "numpy": "2.4.6"}) == []
    after = {**before, "torch": "2.13.0", "tensorflow-cpu": "2.21.0"}
    assert problems(before, after) == [
        "torch 2.15.0 became 2.13.0",
        "two TensorFlow distributions: tensorflow, tensorflow-cpu",
    ]
