"""Fixtures that tests in every folder share: the installed layout, the GCS emulator behind
its fault proxy (`emulator`, `gcs`, `bucket`, `upload`; the servers are in tests/gcs_emulator.py),
an S3 server behind the same proxy (`s3_server`, `s3`, `s3_bucket`, `s3_upload`;
tests/s3_server.py), and a web server with the Hugging Face Hub's layout behind it too
(`web_server`, `web`, `web_bucket`, `web_upload`, `hub`; tests/http_server.py)."""

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


# -- the S3 server -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1, started on first use, for the whole session."""
    pytest.importorskip("boto3", reason="pip install tpufeed[s3]")
    pytest.importorskip("moto.server", reason="pip install tpufeed[dev]")
    from tests.s3_server import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_proxy(s3_server):
    from tests.s3_server import S3FaultProxy

    proxy = S3FaultProxy(s3_server.port)
    yield proxy
    proxy.stop()


@pytest.fixture
def s3(s3_proxy, monkeypatch, tmp_path):
    """The S3 fault proxy, reset, with tpufeed (boto3) pointed at it, test credentials, and the
    shard cache under tmp_path."""
    from tests.s3_server import CREDENTIALS

    s3_proxy.reset()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_proxy.url)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))
    return s3_proxy


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh bucket's name."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_upload(s3_server):
    """s3_upload(bucket, name, data or local path) -> s3:// URL, straight to the server."""
    client = s3_server.client()

    def put(bucket: str, name: str, data: bytes | str) -> str:
        if isinstance(data, bytes):
            client.put_object(Bucket=bucket, Key=name, Body=data)
        else:
            client.upload_file(data, bucket, name)
        return f"s3://{bucket}/{name}"

    return put


# -- the web server and the Hub ----------------------------------------------------------------


@pytest.fixture(scope="session")
def web_server(tmp_path_factory):
    """A web server on 127.0.0.1 (files with ranges and ETags, and the Hub's layout), for the
    whole session."""
    from tests.http_server import WebServer

    server = WebServer(tmp_path_factory.mktemp("web"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def web_proxy(web_server):
    from tests.http_server import WebFaultProxy

    proxy = WebFaultProxy(web_server.port)
    yield proxy
    proxy.stop()


@pytest.fixture
def web(web_server, web_proxy, monkeypatch, tmp_path):
    """The web fault proxy, reset, with the Hub's paths pointed at it (HF_ENDPOINT), no Hub
    token from the machine, and the shard cache under tmp_path. `web.url` is the proxy's."""
    web_server.reset()
    web_proxy.reset()
    monkeypatch.setenv("HF_ENDPOINT", web_proxy.url)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))
    return web_proxy


@pytest.fixture
def web_bucket(web_server) -> str:
    """A fresh folder's name under the server's root."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    (web_server.root / name).mkdir()
    return name


@pytest.fixture
def web_upload(web_server, web_proxy):
    """web_upload(folder, name, data or local path) -> its URL through the proxy; a file put
    there replaces any before it by a rename (another inode: another ETag)."""

    def put(folder: str, name: str, data: bytes | str) -> str:
        target = web_server.root / folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
        if isinstance(data, bytes):
            temporary.write_bytes(data)
        else:
            shutil.copy2(data, temporary)
        temporary.rename(target)
        return f"{web_proxy.url}/files/{folder}/{name}"

    return put


@pytest.fixture
def hub(web, web_server):
    """The server's Hub, its repositories emptied."""
    web_server.hub.repos.clear()
    return web_server.hub
