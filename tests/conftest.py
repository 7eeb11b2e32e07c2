"""Fixtures that tests in every folder share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def installed_layout(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `tpufeed/` as the wheel installs it, with transforms/ as
    tpufeed/transforms (pyproject's package-dir, which tools reading a checkout cannot follow).

    Its files are links to the checkout's, and it lives in .pytest_cache when there is one, so
    a tool's cache of it (mypy's) stays valid from one run to the next.
    """
    cache = getattr(request.config, "cache", None)
    home = cache.mkdir("installed") if cache is not None else tmp_path_factory.mktemp("installed")
    site = home / "site"
    shutil.rmtree(site, ignore_errors=True)
    package = site / "tpufeed"
    package.mkdir(parents=True)
    for entry in (ROOT / "tpufeed").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "transforms").symlink_to(ROOT / "transforms")
    return site
