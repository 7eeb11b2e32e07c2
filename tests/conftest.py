"""Fixtures that tests in every folder share: the installed layout, and the GCS emulator behind
its fault proxy (`emulator`, `gcs`, `bucket`, `upload`; the servers are in tests/gcs_emulator.py)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tests.gcs_emulator import Emulator, FaultProxy

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def installed_layout(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
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
        if entry.name not in ("__pycache__", "transforms"):  # a worktree's link to transforms/
            (package / entry.name).symlink_to(entry)
    (package / "transforms").symlink_to(ROOT / "transforms")
    return site


# -- the GCS emulator --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def emulator():
    """`gcp-storage-emulator` on 127.0.0.1, started on first use, for the whole session."""
    pytest.importorskip("google.cloud.storage")
    pytest.importorskip("gcp_storage_emulator", reason="pip install tpufeed[dev]")
    server = Emulator()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fault_proxy(emulator):
    proxy = FaultProxy(emulator.port)
    yield proxy
    proxy.stop()


@pytest.fixture
def gcs(fault_proxy, monkeypatch, tmp_path):
    """The fault proxy, reset, with tpufeed pointed at it and its cache under tmp_path."""
    fault_proxy.reset()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fault_proxy.url)
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))
    return fault_proxy


@pytest.fixture
def bucket(emulator) -> str:
    """A fresh bucket's name."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    emulator.client().create_bucket(name)
    return name


@pytest.fixture
def upload(emulator):
    """upload(bucket, name, data or local path) -> gs:// URL, straight to the emulator."""
    client = emulator.client()

    def put(bucket: str, name: str, data: bytes | str) -> str:
        blob = client.bucket(bucket).blob(name)
        if isinstance(data, bytes):
            blob.upload_from_string(data)
        else:
            blob.upload_from_filename(data)
        return f"gs://{bucket}/{name}"

    return put
