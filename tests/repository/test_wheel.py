"""The wheel as PyPI would get it: the licence text inside, SPDX metadata, classifiers, keywords,
and the version that `tpufeed.__version__` reads back from the installed metadata.

The wheel is built from a copy of the files it is made of (pyproject.toml, README.md, LICENSE,
tpufeed/, transforms/), with the setuptools installed here, so the checkout is not written to.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tpufeed

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("tpufeed", "transforms"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*command, "-q", "-w", str(out), str(source)], check=True)
    (path,) = out.glob("tpufeed-*.whl")
    with zipfile.ZipFile(path) as opened:
        yield opened


def metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


def test_the_wheel_carries_the_apache_licence_text(wheel):
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    text = wheel.read(name).decode()
    assert text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_metadata_has_the_spdx_licence_classifiers_and_keywords(wheel):
    found = metadata(wheel)
    assert found["License-Expression"] == "Apache-2.0"
    assert found["License-File"] == "LICENSE"
    assert not [c for c in found.get_all("Classifier") if c.startswith("License ::")]
    assert found.get_all("Classifier") == PROJECT["classifiers"]
    assert found["Keywords"].split(",") == PROJECT["keywords"]
    assert found["Requires-Python"] == PROJECT["requires-python"]


def test_the_version_has_one_source(wheel):
    """pyproject.toml's version, in the wheel and as `tpufeed.__version__` (read from the
    installed metadata: never written a second time in the code)."""
    assert metadata(wheel)["Version"] == PROJECT["version"] == tpufeed.__version__
    init = (ROOT / "tpufeed" / "__init__.py").read_text()
    assert PROJECT["version"] not in init
