"""Every GCS wait is bounded: a server that accepts connections and never answers, a server
that answers listings but never sends bytes, and the per-attempt arithmetic of the bound."""

from __future__ import annotations

import socket
import threading

import pytest

import tpufeed
from tests.gcs_emulator import upload_shards
from tpufeed.errors import InvalidArgumentError, SourceError
from tpufeed.storage.retry import DEADLINE_S, REQUEST_TIMEOUT_S, RetryPolicy, call_with_retry


class SilentServer:
    """Accepts every connection on 127.0.0.1 and never answers (nor closes) it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.held: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent(monkeypatch, tmp_path):
    server = SilentServer()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))
    yield server
    server.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "construct, what",
    [
        (
            lambda t: tpufeed.Dataset.from_array_record("gs://bkt/train-*.ar", timeout_s=t),
            "train-*",
        ),
        (lambda t: tpufeed.Dataset.from_tfrecord("gs://bkt/one.tfrecord", timeout_s=t), "one.tf"),
        (lambda t: tpufeed.Dataset.from_parquet(["gs://bkt/p.parquet"], timeout_s=t), "p.parquet"),
        (lambda t: tpufeed.Dataset.open("gs://bkt/built", timeout_s=t), "built/manifest.json"),
    ],
    ids=["array_record", "tfrecord", "parquet", "open"],
)
def test_construction_against_a_silent_server_ends_within_timeout_s(silent, construct, what):
    with pytest.raises(SourceError) as raised:
        construct(1.5)
    message = str(raised.value)
    assert f"gs://bkt/{what}" in message  # the bucket and the object
    assert "may take 1.5 s, retries included" in message  # the bound
    assert "timeout_s=" in message  # and how to change it
    assert silent.held  # it did reach the server


@pytest.mark.emulator
@pytest.mark.timeout(120)
def test_counting_shards_whose_bytes_never_come_ends_within_timeout_s(gcs, bucket, upload):
    """Listing answers, ranges hang: 40 shards counted on 16 threads fail as one, not in turn."""
    url, _ = upload_shards(upload, bucket, "hang", 40, 20)
    gcs.set_faults(slow_paths="alt=media", delay_s=30)
    with pytest.raises(SourceError, match=rf"gs://{bucket}/hang/part-000\d\d.*may take 1 s"):
        tpufeed.Dataset.from_array_record(url, timeout_s=1)
    assert len(gcs.counters.only(bucket).paths) < 40 + 16 * 2  # no call waited its turn


def test_each_attempt_gets_what_is_left_of_the_deadline_at_most():
    given: list[float] = []

    def never(timeout: float) -> None:
        given.append(timeout)
        raise TimeoutError("no answer")

    policy = RetryPolicy(attempts=1000, deadline_s=0.3, timeout_s=0.2, max_backoff_s=0.01)
    with pytest.raises(SourceError, match=r"gs://b/o: gave up testing .* may take 0.3 s"):
        call_with_retry(never, "gs://b/o", "testing", policy)
    assert given[0] == 0.2 and all(t <= 0.2 for t in given) and min(given) < 0.2
    defaults = RetryPolicy()
    assert (defaults.deadline_s, defaults.timeout_s) == (DEADLINE_S, REQUEST_TIMEOUT_S)
    assert (DEADLINE_S, REQUEST_TIMEOUT_S) == (120.0, 60.0)  # what docs/faults.md states


def test_timeout_s_sets_the_whole_bound_and_is_checked():
    assert RetryPolicy.within(None) == RetryPolicy()
    assert (RetryPolicy.within(5).deadline_s, RetryPolicy.within(5).timeout_s) == (5.0, 5)
    assert RetryPolicy.within(600).timeout_s == REQUEST_TIMEOUT_S
    for bad in (0, -1, float("inf"), "5", True):
        with pytest.raises(InvalidArgumentError, match="timeout_s must be a positive number"):
            RetryPolicy.within(bad)
    with pytest.raises(InvalidArgumentError, match="timeout_s"):
        tpufeed.Dataset.from_array_record("gs://bkt/x.ar", timeout_s=0)
