"""The editable install the README gives for editors and type checkers lets mypy see tpufeed's
types, `tpufeed.transforms` (installed from transforms/) included (issue 47: with setuptools'
default editable mode, an import hook, editors and mypy saw no tpufeed type at all)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_CODE = """\
import tpufeed
from tpufeed.transforms import Cast

reveal_type(tpufeed.Dataset.from_sequence)
reveal_type(Cast)
"""


def test_the_readme_gives_the_strict_editable_install():
    text = (ROOT / "README.md").read_text()
    assert "--config-settings editable_mode=strict" in text


@pytest.mark.slow
def test_a_strict_editable_install_shows_mypy_the_types(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("tpufeed", "transforms"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    venv = tmp_path / "venv"
    # This environment's pip, setuptools and mypy; the venv's own site-packages gets tpufeed.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*install, "--no-index", "-e", str(source), "--config-settings", "editable_mode=strict"],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    (tmp_path / "user.py").write_text(USER_CODE)
    checked = subprocess.run(
        [python, "-m", "mypy", "--no-incremental", "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    revealed = re.findall(r'Revealed type is "(.*)"', checked.stdout)
    assert revealed[0].endswith("-> tpufeed.dataset.Dataset"), revealed
    assert revealed[1].endswith("-> tpufeed.transforms.features.Cast"), revealed
