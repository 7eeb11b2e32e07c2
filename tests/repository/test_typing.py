"""tpufeed is a typed package: mypy finds no error in it, and a user's type checker sees the
real types of the public API (and reports its misuse).

mypy checks tpufeed as the wheel installs it (transforms/ as tpufeed/transforms, which mypy
cannot follow from pyproject's package-dir), with the settings of pyproject's [tool.mypy]. Its
cache is kept in .pytest_cache: the first run takes a minute or two, later ones seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# Each reveal_type line says the type it must reveal; each misuse line the error code it must get.
USER_SCRIPT = """
from typing import Any

import numpy as np

import tpufeed


def decode(record: bytes) -> dict[str, Any]:
    return tpufeed.codec.decode(record)


def augment(element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    return {**element, "noise": rng.random()}


def keep(element: dict[str, Any]) -> bool:
    return bool(element)


ds = (tpufeed.Dataset.from_array_record("train-*.array_record")
      .shuffle(seed=0)
      .shard()
      .map(decode)
      .random_map(augment)
      .filter(keep)
      .batch(256, drop_remainder=True)
      .repeat()
      .workers(8)
      .prefetch(4))
reveal_type(ds)  # tpufeed.dataset.Dataset
reveal_type(tpufeed.Dataset.from_sequence(range(10)).flat_map(str.split))  # tpufeed.dataset.Dataset
reveal_type(tpufeed.Dataset.mix([ds, ds], weights=[0.7, 0.3], seed=0))  # tpufeed.dataset.Dataset
reveal_type(len(ds))  # int
reveal_type(tpufeed.Dataset.source([1, 2]))  # tpufeed.dataset.Dataset
reveal_type(ds[2:8])  # tpufeed.dataset.Dataset
reveal_type(ds.take(5).skip(1))  # tpufeed.dataset.Dataset
reveal_type(ds.options())  # tpufeed.run.autotune.Options
reveal_type(ds.options(timeout_s=5))  # tpufeed.dataset.Dataset
it = iter(ds)
reveal_type(it)  # tpufeed.run.iterator.DatasetIterator
reveal_type(next(it))  # Any
for batch in ds:
    reveal_type(batch)  # Any
state = it.get_state()
reveal_type(state)  # dict[str, Any]
reveal_type(ds.iterator(state))  # tpufeed.run.iterator.DatasetIterator
reveal_type(ds.iterator([state, state]))  # tpufeed.run.iterator.DatasetIterator
it.set_state(state)
reveal_type(ds.to_jax())  # tpufeed.adapters.jax.JaxIterator
reveal_type(ds.to_jax().get_state())  # dict[str, Any]
data = tpufeed.codec.encode({"tokens": np.arange(4)})
reveal_type(data)  # bytes
reveal_type(tpufeed.codec.decode(data))  # dict[str, Any]
try:
    next(it)
except tpufeed.TpufeedError as error:
    reveal_type(error)  # tpufeed.errors.TpufeedError

ds.batch("8")  # error: arg-type
ds.shuffle(seed=0, window="all")  # error: arg-type
tpufeed.codec.encode({1: b"x"})  # error: dict-item
it.get_state().missing  # error: attr-defined
"""

_NOTE = re.compile(r"^user_script\.py:(\d+): note: Revealed type is \"(.*)\"$")
_ERROR = re.compile(r"^user_script\.py:(\d+): error: .*\[([a-z-]+)\]$")


@pytest.fixture(scope="module")
def mypy_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mypy's cache, in .pytest_cache where there is one, so a warm cache outlives the run."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("mypy") if cache is not None else tmp_path_factory.mktemp("mypy")


def run_mypy(cache: Path, site: Path, *targets: str) -> str:
    """mypy's output with pyproject's settings, from the installed layout `site` (pyproject's
    `files` when no target is given)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--show-error-codes",
            *targets,
        ],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=280,
    )
    return done.stdout + done.stderr


def test_mypy_finds_no_error_in_tpufeed(mypy_cache: Path, installed_layout: Path) -> None:
    output = run_mypy(mypy_cache, installed_layout)
    assert output.startswith("Success: no issues found"), (
        f"mypy reports errors in tpufeed (tpufeed/transforms/ is transforms/ here):\n{output}"
    )


def test_users_see_the_public_api_types(mypy_cache: Path, installed_layout: Path) -> None:
    script = installed_layout / "user_script.py"
    script.write_text(textwrap.dedent(USER_SCRIPT))
    output = run_mypy(mypy_cache, installed_layout, script.name)
    lines = script.read_text().splitlines()
    expected_types = {
        i: line.split("# ")[-1]
        for i, line in enumerate(lines, 1)
        if line.lstrip().startswith("reveal_type(")
    }
    expected_errors = {
        i: line.split("# error: ")[-1] for i, line in enumerate(lines, 1) if "# error: " in line
    }
    revealed = {int(m[1]): m[2] for m in map(_NOTE.match, output.splitlines()) if m}
    errors = {int(m[1]): m[2] for m in map(_ERROR.match, output.splitlines()) if m}
    assert revealed == expected_types, f"revealed types differ from the expected ones:\n{output}"
    assert errors == expected_errors, f"mypy's errors in the user script differ:\n{output}"
