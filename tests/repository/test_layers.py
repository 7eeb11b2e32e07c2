"""The package's layers hold, and the frameworks stay out of its core.

import-linter checks the contracts in pyproject.toml ([tool.importlinter]): the layers (a
module imports only from its own layer or lower ones, lazy and type-checking imports too),
no import circle between any two siblings, and private modules used only inside their package.
It reads tpufeed as the wheel installs it, so tpufeed.transforms is checked with the rest.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Importing these pulls in no framework: the frameworks are imported where they are used.
CORE = ("codec", "dataset", "errors", "ops", "order", "run", "sources", "storage", "transforms")
FRAMEWORKS = ("apache_beam", "grain", "jax", "orbax", "tensorflow", "torch")


def lint_imports(config: Path, site: Path) -> subprocess.CompletedProcess:
    """import-linter with the contracts of `config`, over the package laid out in `site` (it
    reads the package from its working directory)."""
    code = (
        "import sys\nfrom importlinter.cli import lint_imports\n"
        f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=site, capture_output=True, text=True, timeout=120
    )


def test_the_import_contracts_hold(installed_layout: Path) -> None:
    done = lint_imports(ROOT / "pyproject.toml", installed_layout)
    assert done.returncode == 0, f"import contracts broken:\n{done.stdout}\n{done.stderr}"
    assert " kept, 0 broken." in done.stdout, done.stdout


def test_a_broken_layer_is_reported(installed_layout: Path, tmp_path: Path) -> None:
    """The check can fail: a contract that puts run/ below ops/ is broken by today's code."""
    config = tmp_path / "upside_down.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["tpufeed"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "upside down"\ntype = "layers"\n'
        'containers = ["tpufeed"]\nlayers = ["ops", "run"]\n'
    )
    done = lint_imports(config, installed_layout)
    assert done.returncode != 0
    assert "tpufeed.run" in done.stdout and "BROKEN" in done.stdout, done.stdout


@pytest.mark.parametrize("layer", CORE)
def test_the_core_imports_no_framework(installed_layout: Path, layer: str) -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        f"package = importlib.import_module('tpufeed.{layer}')\n"
        "for info in pkgutil.walk_packages(getattr(package, '__path__', []), "
        "package.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        f"print(sorted(set({FRAMEWORKS!r}) & {{m.split('.')[0] for m in sys.modules}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=installed_layout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"tpufeed.{layer} imports {done.stdout.strip()}"
