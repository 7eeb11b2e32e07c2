"""https:// and http:// files against a real web server on 127.0.0.1 behind the fault proxy:
sizes and versions, ranged reads, retries through 503s, resets, cut and stalled bodies,
replaced and deleted files, servers without ranges or versions, TLS (storage/stores/web.py,
storage/stores/http_client.py)."""

from __future__ import annotations

import os
import time

import pytest

from tests.http_server import WebServer, self_signed
from tpufeed.errors import (
    InvalidArgumentError,
    ObjectChangedError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.observe import counts
from tpufeed.storage import backends
from tpufeed.storage.cache.transfers import read_ranges
from tpufeed.storage.local import expand_paths, resolve_paths
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.retry import RetryPolicy

pytestmark = pytest.mark.emulator


@pytest.fixture
def files(web, web_bucket, web_upload):
    data = {"a.bin": os.urandom(3000), "b.bin": b"0123456789" * 50, "empty.bin": b""}
    return {name: (web_upload(web_bucket, name, blob), blob) for name, blob in data.items()}


def test_a_file_is_known_by_its_size_etag_and_time(files, tmp_path):
    url, blob = files["a.bin"]
    local = tmp_path / "x.bin"
    local.write_bytes(b"x")
    first, middle = resolve_paths([url, str(local)])
    assert middle == str(local)
    assert isinstance(first, RemoteObject) and first.url == url and first.scheme == "http"
    assert first.size == len(blob) and first.generation > 0 and first.crc32c is None
    assert first.etag and first.etag.startswith('"') and first.version == first.etag
    assert backends.stat(url) == first
    assert backends.stat(files["empty.bin"][0]).size == 0
    assert expand_paths([files["b.bin"][0], url]) == [files["b.bin"][0], url]


def test_globs_folders_and_missing_files_are_refused_by_name(files, web):
    url = files["a.bin"][0]
    with pytest.raises(InvalidArgumentError, match="cannot be a glob.*hf://datasets"):
        expand_paths(url.replace("a.bin", "*.bin"))
    with pytest.raises(InvalidArgumentError, match="names no file"):
        expand_paths(url.replace("a.bin", ""))
    with pytest.raises(InvalidArgumentError, match="cannot be listed"):
        backends.list_prefix(url.replace("a.bin", ""))
    with pytest.raises(SourceNotFoundError, match=r"nope\.bin: not found \(HTTP 404\)"):
        expand_paths(url.replace("a.bin", "nope.bin"))
    assert web.counters.requests == 1  # a 404 is not retried


def test_ranged_reads_are_exact(files, web):
    url, blob = files["a.bin"]
    obj = backends.stat(url)
    assert backends.read_range(obj, 10, 20) == blob[10:20]
    assert read_ranges(obj, [(0, 1), (2999, 3000), (5, 2500)], RetryPolicy()) == [
        blob[0:1],
        blob[2999:3000],
        blob[5:2500],
    ]
    with pytest.raises(InvalidArgumentError, match="outside its 3000 bytes"):
        backends.read_range(obj, 2990, 3001)
    path = os.environ["TPUFEED_CACHE_DIR"] + "-f.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, 3000)
        backends.fetch_into(obj, 1000, 3000, fd)
        assert os.pread(fd, 2000, 1000) == blob[1000:]
    finally:
        os.close(fd)
        os.unlink(path)
    ranges = [r for _, r in web.counters.ranges]
    assert "bytes=10-19" in ranges and "bytes=1000-2999" in ranges


def test_reads_survive_503s_resets_cut_and_stalled_bodies(files, web):
    url, blob = files["a.bin"]
    obj = backends.stat(url)
    web.set_faults(error_503=0.2, reset=0.1, cut=0.1, stall=0.1, delay_s=1.0, seed=3)
    before = counts.snapshot()
    policy = RetryPolicy(timeout_s=0.3, initial_backoff_s=0.01)
    for start in range(0, 3000, 100):
        assert backends.read_range(obj, start, start + 100, policy) == blob[start : start + 100]
    after = counts.snapshot()
    assert web.counters.faults > 5
    assert after["http_retries"] - before["http_retries"] >= web.counters.faults
    assert after["http_requests"] - before["http_requests"] >= 30 + web.counters.faults
    assert after["http_bytes"] - before["http_bytes"] >= 3000
    assert after["gcs_requests"] == before["gcs_requests"]  # counted as HTTP's


def test_a_body_that_stalls_ends_within_the_bound(files, web):
    obj = backends.stat(files["a.bin"][0])
    web.set_faults(stall=1.0, delay_s=5.0)
    started = time.monotonic()
    with pytest.raises(
        SourceError, match=r"a\.bin: gave up reading bytes .* HTTP call may take 1 s"
    ):
        backends.read_range(obj, 0, 100, RetryPolicy.within(1.0))
    assert time.monotonic() - started < 3.0


def test_transient_errors_give_up_after_the_attempts(files, web):
    obj = backends.stat(files["b.bin"][0])
    web.set_faults(error_503=1.0)
    policy = RetryPolicy(attempts=3, initial_backoff_s=0.01)
    with pytest.raises(SourceError, match=r"gave up .* after 3 attempts .*HTTP call.*HTTP 503"):
        backends.read_range(obj, 0, 10, policy)


def test_permission_denied_says_what_to_check(files, web):
    web.set_faults(deny_paths="b.bin")
    with pytest.raises(SourceError, match=r"permission denied \(HTTP 403\).*signed URL"):
        backends.stat(files["b.bin"][0])
    assert web.counters.requests == 1  # not retried


def test_a_replaced_file_is_named_with_both_etags(files, web_server, web_bucket, web_upload):
    url, blob = files["b.bin"]
    obj = backends.stat(url)
    assert backends.read_range(obj, 0, 5) == b"01234"
    web_upload(web_bucket, "b.bin", b"9876543210" * 50)  # same size, another file
    now = backends.stat(url).etag
    with pytest.raises(ObjectChangedError, match=rf"ETag {obj.etag}, now ETag {now}") as e:
        backends.read_range(obj, 0, 5)
    assert e.value.path == url
    os.unlink(web_server.root / web_bucket / "b.bin")
    with pytest.raises(ObjectChangedError, match="was deleted while it was read"):
        backends.read_range(obj, 0, 5)


def test_a_file_without_an_etag_is_pinned_by_its_time_and_size(
    files, web_server, web_bucket, web_upload
):
    web_server.etags = False
    url, _ = files["b.bin"]
    obj = backends.stat(url)
    assert obj.etag is None and obj.generation > 0
    assert backends.read_range(obj, 0, 3) == b"012"
    path = web_server.root / web_bucket / "b.bin"
    os.utime(path, ns=(time.time_ns(), obj.generation * 1000 + 5_000_000_000))
    with pytest.raises(ObjectChangedError, match=r"Last-Modified .*, 500 bytes, now"):
        backends.read_range(obj, 0, 3)


def test_servers_without_ranges_or_versions_are_refused_by_name(files, web_server):
    url = files["a.bin"][0]
    web_server.ranges = False
    with pytest.raises(SourceError, match=r"answered a byte range with the whole file"):
        backends.stat(url)
    web_server.ranges = True
    web_server.etags = web_server.last_modified = False
    with pytest.raises(SourceError, match="neither an ETag nor a Last-Modified"):
        backends.stat(url)


def test_https_checks_the_certificate(tmp_path, monkeypatch):
    folder = tmp_path / "root"
    folder.mkdir()
    (folder / "x.bin").write_bytes(b"over tls" * 100)
    cert, key = self_signed(tmp_path)
    server = WebServer(folder, tls=(cert, key))
    try:
        url = f"{server.url}/files/x.bin"
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-ca.pem"))
        with pytest.raises(SourceError, match=r"x\.bin: SSLCertVerificationError") as e:
            backends.stat(url, RetryPolicy(initial_backoff_s=0.01))
        assert "gave up" not in str(e.value)  # a bad certificate is not retried
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        obj = backends.stat(url)
        assert obj.scheme == "https" and backends.read_range(obj, 0, 8) == b"over tls"
    finally:
        server.stop()
