"""CI: every extra at the lowest versions pyproject.toml claims, each in a venv of its own.

For each group below, `uv pip install --resolution lowest-direct -e ".[extra]"` puts tpufeed's
direct requirements at their floors (the lowest that install together) and everything they
pull at the newest, as a user with an old stack gets it, from PyPI alone (torch's floor is
PyPI's build). The script then checks that the extra's own requirements did land on their
floors (one that lands higher is a floor no install can reach: raise it) and runs the group's
smoke tests, refusing skips (a skip is a module that did not import). `.ci/newest.py` runs the
same groups at the newest releases.

    python .ci/lowest.py                  # every group
    python .ci/lowest.py tf torch         # some
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CI_PINS = ROOT / "constraints" / "ci.txt"
TEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis", "psutil", "threadpoolctl")


@dataclass(frozen=True)
class Group:
    """An extra, requirements named elsewhere in pyproject (at their floors), and its tests."""

    name: str
    extras: tuple[str, ...]
    tests: tuple[str, ...]  # pytest arguments
    also: tuple[str, ...] = ()  # names from any of pyproject's lists: the tests' TensorFlow
    tools: tuple[str, ...] = ()  # test tools beyond TEST_TOOLS, at constraints/ci.txt's version
    beside: tuple[str, ...] = ()  # a user's own distributions, installed with it (newest)
    marks: str = "not slow"  # pytest's -m


GROUPS = (
    Group(
        "base",
        (),
        ("tests/test_codec.py", "tests/test_dataset.py")
        + ("tests/sources/test_tfrecord.py::test_crcs_are_computed_by_the_c_extension",)
        # protobuf's floor: tf.train.Example parsed by its parser (TensorFlow is not here)
        + ("tests/transforms/test_example.py", "-k", "not interoperates_with_tensorflow"),
    ),
    Group("jax", ("jax",), ("tests/adapters/test_jax.py",)),
    Group("orbax", ("orbax",), ("tests/checkpoint/test_orbax_handler.py",)),
    Group(
        "tf",
        ("tf",),
        ("tests/adapters/test_tf.py", "tests/adapters/test_keras.py")
        + ("tests/adapters/test_tensorflow.py",),  # the floor itself passes the run-time check
        also=("tensorflow-cpu",),
    ),
    Group(
        "torch",
        ("torch",),
        ("tests/adapters/test_torch.py", "tests/adapters/test_torch_state.py"),
        # StatefulDataLoader's checkpoints: torchdata, which the user installs (tpufeed never imports it)
        tools=("torchdata",),
    ),
    Group(
        "beam",
        ("beam",),
        ("tests/beam/test_build.py", "-k", "jsonl_build_open or csv_missing or bad_arguments"),
    ),
    Group(
        "grain",
        ("grain",),
        ("tests/semantics/test_restore_every_step.py", "tests/sources/test_array_record.py")
        + ("-k", "grain_reads or 0]"),
    ),
    Group(
        "gcs",
        ("gcs",),
        # api-core's retry loop; the parquet case needs pyarrow, not in this group
        ("tests/storage/test_gcs.py", "tests/storage/test_retry.py", "-k", "not parquet"),
        tools=("gcp-storage-emulator",),
    ),
    Group(
        "s3",
        ("s3",),
        # boto3's floor against a real S3 server (moto's, in a thread: flask serves it)
        ("tests/storage/test_s3.py",),
        tools=("moto", "flask", "flask-cors"),
    ),
    Group(
        "images",
        ("images", "opencv"),  # Pillow's floor, and OpenCV's where the user has none
        (
            "tests/transforms/test_image.py",
            "tests/transforms/test_crops.py",
            "-k",
            "not in_a_build",
        ),
        tools=("scipy", "scikit-learn"),  # test_crops: scipy.stats, and sklearn's photographs
    ),
    Group(
        "turbojpeg",
        ("turbojpeg", "opencv"),
        # simplejpeg's libjpeg-turbo 3; no libturbojpeg 3 here for the window
        ("tests/transforms/test_turbojpeg.py", "-k", "not window"),
        tools=("scipy", "scikit-learn"),  # test_crops' photographs
    ),
    Group("text", ("text",), ("tests/transforms/test_text.py", "-k", "not in_a_build")),
    Group(
        "parquet",
        ("parquet",),
        ("tests/sources/test_parquet.py", "-k", "not gs_files and not workers"),
    ),
    Group("huggingface", ("huggingface",), ("tests/sources/test_huggingface.py",)),
    # the image columns are compared as pixels: the images extra decodes them
    Group("mds", ("mds", "images"), ("tests/sources/test_mds.py", "-k", "not gcs and not workers")),
    Group("metrics", ("metrics",), ("tests/run/test_metrics.py",)),
    # `tpufeed quickstart` as the quickstart page installs it: JAX and scikit-learn's digits
    Group(
        "quickstart",
        ("quickstart",),
        ("tests/cli/test_quickstart.py", "-k", "one_epoch or input_wait"),
        marks="",  # the one-epoch run is a slow test
    ),
    # `all`'s own requirement: bench's plot
    Group("all", (), ("tests/cli/test_bench_plot.py",), also=("matplotlib",)),
)


def own_requirements(project: dict, group: Group) -> list[Requirement]:
    """The requirements whose floors `group` proves: the extras' own (tpufeed's base ones for
    `base`) and `also`, looked up in every list of pyproject.toml."""
    optional = project["optional-dependencies"]
    lines = list(project["dependencies"]) if not group.extras else []
    lines += [line for extra in group.extras for line in optional[extra]]
    every = [Requirement(line) for lines_ in optional.values() for line in lines_]
    named = {canonicalize_name(r.name): r for r in every}
    found = [r for r in map(Requirement, lines) if canonicalize_name(r.name) != project["name"]]
    return found + [named[canonicalize_name(name)] for name in group.also]


def floor(requirement: Requirement) -> Version | None:
    return next((Version(s.version) for s in requirement.specifier if s.operator == ">="), None)


def pins(path: Path) -> dict[str, str]:
    """{name: `name==version`} of a constraints file."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {canonicalize_name(line.split("==")[0]): line for line in lines if "==" in line}


def install(
    group: Group, venv: Path, project: dict, resolution: str = "lowest-direct"
) -> dict[str, str]:
    """Makes the group's venv, its requirements resolved from PyPI at `resolution` (the test
    tools at constraints/ci.txt's versions, or the newest with "highest"); returns {name:
    version} of what is in it."""
    ci = pins(CI_PINS)
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    extras = f"[{','.join(group.extras)}]" if group.extras else ""
    also = [str(r) for r in own_requirements(project, group) if r.name in group.also]
    tools = [canonicalize_name(name) for name in TEST_TOOLS + group.tools]
    if resolution != "highest":
        tools = [ci[name] for name in tools]
    command = ["uv", "pip", "install", "-q", "--resolution", resolution, "--no-config"]
    command += ["-e", f"{ROOT}{extras}", *also, *tools, *group.beside]
    subprocess.run(command, check=True, env=env)
    frozen = subprocess.run(
        ["uv", "pip", "freeze"], check=True, env=env, capture_output=True, text=True
    ).stdout
    pairs = (line.split("==", 1) for line in frozen.splitlines() if "==" in line)
    return {canonicalize_name(name): version for name, version in pairs}


def off_floor(project: dict, group: Group, versions: dict[str, str]) -> list[str]:
    """The group's requirements that did not install at their floors, as sentences."""
    found = []
    for requirement in own_requirements(project, group):
        lowest, name = floor(requirement), canonicalize_name(requirement.name)
        got = versions.get(name)
        if lowest is not None and (got is None or Version(got).public != lowest.public):
            found.append(f"{requirement} installed as {got}: raise the floor to what installs")
    return found


def smoke(group: Group, venv: Path) -> tuple[list[str], int, int]:
    """Runs the group's tests in its venv: (the failures as sentences, tests passed, failed)."""
    command = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-m", group.marks, "-rs", "--timeout", "300", *group.tests]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"  {summary}", flush=True)
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|error)", summary)}
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if result.returncode != 0 or "skipped" in summary:
        print(result.stdout[-6000:], result.stderr[-3000:], sep="\n")
        return [f"tests: {summary}"], counts.get("passed", 0), max(failed, 1)
    return [], counts.get("passed", 0), 0


def main(names: list[str]) -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if shutil.which("uv") is None:
        sys.exit("uv is not installed; it is in the dev extra: pip install -e '.[dev]'")
    unknown = set(names) - {group.name for group in GROUPS}
    if unknown:
        sys.exit(f"no group {sorted(unknown)}; the groups: {[g.name for g in GROUPS]}")
    failed: dict[str, list[str]] = {}
    tests = {"passed": 0, "failed": 0}
    for group in (g for g in GROUPS if not names or g.name in names):
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"lowest-{group.name}-") as scratch:
            venv = Path(scratch) / "venv"
            try:
                versions = install(group, venv, project)
            except subprocess.CalledProcessError as error:  # uv said why, above
                failed[group.name] = [f"the install failed: {' '.join(error.cmd)}"]
                tests["failed"] += 1
                continue
            direct = ", ".join(
                f"{r.name} {versions.get(canonicalize_name(r.name))}"
                for r in own_requirements(project, group)
            )
            print(f"[{group.name}] {direct}", flush=True)
            problems, passed, failing = smoke(group, venv)
            problems = off_floor(project, group, versions) + problems
            tests["passed"] += passed
            tests["failed"] += failing
        print(f"  {time.monotonic() - start:.0f} s", flush=True)
        if problems:
            failed[group.name] = problems
    for name, problems in failed.items():
        print(f"FAILED [{name}]:", *problems, sep="\n  ")
    print(f"lowest: {tests['passed']} passed, {tests['failed']} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
