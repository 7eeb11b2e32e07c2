"""A real GCS emulator on 127.0.0.1 for tests, and a fault-injecting HTTP proxy in front of it.

`Emulator` runs `gcp-storage-emulator` as a subprocess on a free port. `FaultProxy` forwards
every request to it and, at set rates, answers 503, drops the connection before answering, cuts
a response off halfway, stops one halfway (a stalled body), or answers late; it counts requests
and the media bytes it served, so a test can assert that an epoch read nothing. Nothing is mocked at the Python level: tpufeed talks
HTTP to the proxy through google-cloud-storage (`STORAGE_EMULATOR_HOST` points at the proxy).

The emulator ignores object generations on downloads: it serves the current bytes whatever
`generation=` or `ifGenerationMatch=` a request names, and sends no `x-goog-generation`. The
proxy adds what GCS does (`_generation_answer`): a download naming a generation that is no
longer the object's gets 404 (GCS's answer in a bucket without versioning, where a replaced
generation is gone), a failed `ifGenerationMatch` gets 412, and every download says the
generation it served.

The fixtures built on them (`emulator`, `gcs`, `bucket`, `upload`) are in tests/conftest.py;
`upload_shards` writes and uploads whole shards. `python tests/gcs_emulator.py` runs a shaping
proxy on its own (for benchmarks/gcs.py).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

# gcp-storage-emulator's HTTPServer listens with a backlog of 5: with more connections opening
# at once the kernel drops SYNs and clients stall for a 1 s retransmit. Start it with 128, and
# have it end with the process that started it, even one killed without cleaning up.
_LAUNCH = (
    "import ctypes, signal, socketserver, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: go when the parent does\n"
    "socketserver.TCPServer.request_queue_size = 128\n"
    "from gcp_storage_emulator.__main__ import main\n"
    "main(['start', '--host', '127.0.0.1', '--port', sys.argv[1], '--in-memory'])\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Emulator:
    """`gcp-storage-emulator` in memory, in its own process group; `stop()` leaves nothing."""

    def __init__(self) -> None:
        try:
            import gcp_storage_emulator  # noqa: F401
        except ImportError:
            raise ImportError(
                "gcp-storage-emulator is not installed: pip install tpufeed[dev]"
            ) from None
        # Its log goes to a file: it writes a line per request, and a pipe nobody reads fills
        # up after a few hundred requests and stops the emulator mid-answer.
        self.log = tempfile.TemporaryFile()
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=self.log,
                start_new_session=True,
            )
            if self._wait_ready():
                return
            self._kill()
        self.log.seek(0)
        tail = self.log.read()[-2000:].decode(errors="replace")
        self.log.close()
        raise RuntimeError(f"the GCS emulator did not start; its log ends with:\n{tail}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_ready(self, timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/storage/v1/b?project=test")
                conn.getresponse().read()
                conn.close()
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def client(self):
        """A client straight to the emulator (no proxy, no faults): for setting up data."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test",
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=self.url),
        )

    def stop(self) -> None:
        self._kill()
        self.log.close()

    def _kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@dataclass
class Faults:
    """Probabilities per request (they add up: 0.05 each of four faults fails 20%)."""

    error_503: float = 0.0
    reset: float = 0.0  # connection closed before any answer
    cut: float = 0.0  # headers and half the body, then the connection closes
    stall: float = 0.0  # headers and half the body, then nothing for `delay_s`, then it closes
    slow: float = 0.0  # answered after `delay_s`
    delay_s: float = 0.2
    seed: int = 0
    slow_paths: str | None = None  # requests whose path matches this regex: always `delay_s` late
    deny_paths: str | None = None  # requests whose path matches this regex get 403
    latency_s: float = 0.0  # every answer waits this long (a link's first-byte latency)
    mbps: float | None = None  # every answer's body is paced to this many MB/s


@dataclass
class Counters:
    requests: int = 0
    media_requests: int = 0
    media_bytes: int = 0  # object bytes served (whole or partial)
    faults: int = 0
    ranges: list[tuple[str, str]] = field(default_factory=list)  # (object path, Range header)
    paths: list[str] = field(default_factory=list)  # every request's path, in order
    media: list[tuple[str, int]] = field(default_factory=list)  # (path, bytes) of media answers

    def only(self, bucket: str) -> Counters:
        """The counts of requests for `bucket` alone. The proxy serves the whole session, and
        a download another test left running in the background must not count here."""
        from urllib.parse import unquote

        mine = lambda path: f"/b/{bucket}/" in unquote(path)  # noqa: E731
        media = [(path, size) for path, size in self.media if mine(path)]
        return Counters(
            requests=sum(map(mine, self.paths)),
            media_requests=len(media),
            media_bytes=sum(size for _, size in media),
            faults=self.faults,
            ranges=[r for r in self.ranges if mine(r[0])],
            paths=[p for p in self.paths if mine(p)],
            media=media,
        )


class FaultProxy:
    """A threaded HTTP/1.1 proxy on a free port that forwards to `upstream`, with faults."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.faults = Faults()
        self.counters = Counters()
        self._lock = threading.Lock()
        self._rng = random.Random(0)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_faults(self, **settings) -> None:
        with self._lock:
            self.faults = Faults(**settings)
            self._rng = random.Random(self.faults.seed)

    def reset(self) -> None:
        with self._lock:
            self.faults = Faults()
            self.counters = Counters()

    def whole_downloads(self, sizes: dict[str, int]) -> dict[str, int]:
        """How many times each object (name -> size) was fetched whole, in one range or parts."""
        from urllib.parse import unquote

        got = {name: 0 for name in sizes}
        with self._lock:
            requests = list(self.counters.ranges)
        for path, header in requests:
            name = unquote(path.rsplit("/o/", 1)[-1])
            if name in sizes and header.startswith("bytes=") and "-" in header:
                start, _, end = header[len("bytes=") :].partition("-")
                if start == "0" and end and int(end) == sizes[name] - 1:
                    got[name] += 1
        return got

    def _draw(self, path: str) -> str | None:
        with self._lock:
            f, x = self.faults, self._rng.random()
            self.counters.requests += 1
            self.counters.paths.append(path)
            if f.deny_paths and re.search(f.deny_paths, path):
                return "403"
            if f.slow_paths and re.search(f.slow_paths, path):
                return "slow"
            for kind, rate in (
                ("503", f.error_503),
                ("reset", f.reset),
                ("cut", f.cut),
                ("stall", f.stall),
                ("slow", f.slow),
            ):
                if x < rate:
                    self.counters.faults += kind != "slow"
                    return kind
                x -= rate
            return None

    def _generation_answer(self, handler: http.server.BaseHTTPRequestHandler) -> tuple:
        """(status to answer instead, or None; generation to report) for a download, as GCS
        treats `generation=` and `ifGenerationMatch=` (see the module's docstring)."""
        from urllib.parse import parse_qs, urlsplit

        url = urlsplit(handler.path)
        query = parse_qs(url.query)
        match = re.fullmatch(r"(?:/download)?/storage/v1/b/([^/]+)/o/(.+)", url.path)
        if match is None or query.get("alt") != ["media"]:
            return None, None
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            upstream.request("GET", f"/storage/v1/b/{match[1]}/o/{match[2]}")
            response = upstream.getresponse()
            meta = response.read()
        finally:
            upstream.close()
        if response.status != 200:
            return None, None
        current = json.loads(meta)["generation"]
        if query.get("generation", [current])[0] != current:
            return 404, None
        if query.get("ifGenerationMatch", [current])[0] != current:
            return 412, None
        return None, current

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        fault = self._draw(handler.path)
        forwarded = fault in (None, "slow", "cut", "stall")
        refused, generation = self._generation_answer(handler) if forwarded else (None, None)
        if refused is not None:
            fault = str(refused)
        if fault == "reset":
            handler.close_connection = True
            _abort(handler)
            return
        if fault in ("503", "403", "404", "412"):
            payload = b'{"error": {"code": %s, "message": "injected"}}' % fault.encode()
            handler.send_response(int(fault))
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        if fault == "slow":
            time.sleep(self.faults.delay_s)
        if self.faults.latency_s:
            time.sleep(self.faults.latency_s)
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower() not in ("host", "connection", "keep-alive", "proxy-connection")
        }
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            status, reason = response.status, response.reason
            out_headers = [
                (k, v)
                for k, v in response.getheaders()
                if k.lower()
                not in ("content-length", "connection", "transfer-encoding", "keep-alive")
            ]
        finally:
            upstream.close()
        media = self._is_media(handler)
        handler.send_response(status, reason)
        for k, v in out_headers:
            handler.send_header(k, v)
        if generation is not None:
            handler.send_header("x-goog-generation", generation)
        # A HEAD's answer has no body: its Content-Length is the object's, as upstream said.
        length = response.getheader("Content-Length") if handler.command == "HEAD" else None
        handler.send_header("Content-Length", length or str(len(data)))
        handler.end_headers()
        sent = data[: len(data) // 2] if fault in ("cut", "stall") else data
        with self._lock:  # counted before the client can have the bytes (and reset counters)
            if media:
                self.counters.media_requests += 1
                self.counters.media_bytes += len(sent)
                self.counters.media.append((handler.path, len(sent)))
                self.counters.ranges.append(
                    (handler.path.split("?", 1)[0], handler.headers.get("Range", ""))
                )
        _paced_write(handler.wfile, sent, self.faults.mbps)
        if fault == "stall":  # a body that stops: the client's wait between bytes must end it
            handler.wfile.flush()
            time.sleep(self.faults.delay_s)
        if fault in ("cut", "stall"):
            handler.wfile.flush()
            handler.close_connection = True
            _abort(handler)

    def _is_media(self, handler: http.server.BaseHTTPRequestHandler) -> bool:
        """Whether a request downloads object bytes (what `counters.media_*` count)."""
        return "alt=media" in handler.path or handler.path.startswith("/download/")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _paced_write(out, data: bytes, mbps: float | None) -> None:
    if not mbps:
        out.write(data)
        return
    start, step = time.monotonic(), 256 << 10
    for offset in range(0, len(data), step):
        out.write(data[offset : offset + step])
        ahead = start + (offset + step) / (mbps * 1e6) - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def _abort(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Closes the client's connection at once: SO_LINGER 0 makes it a TCP reset."""
    with contextlib.suppress(OSError):
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)


def shard_records(shard: int, count: int, size: int = 600) -> list[bytes]:
    """Distinct records: shard and index in the first bytes, then filler."""
    return [
        shard.to_bytes(2, "little") + i.to_bytes(4, "little") + bytes([i % 251]) * size
        for i in range(count)
    ]


def upload_shards(
    upload,
    bucket: str,
    folder: str,
    shards: int,
    records: int,
    file_format: str = "array_record",
    scheme: str = "gs",
) -> tuple[str, list[bytes]]:
    """Writes `shards` files of `records` records each and uploads them with `upload` (to the
    GCS emulator, or with scheme="s3" to the S3 server); (glob URL, records)."""
    import tempfile

    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.tfrecord import write_tfrecords

    write = write_array_records if file_format == "array_record" else write_tfrecords
    everything: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in range(shards):
            recs = shard_records(s, records)
            path = os.path.join(tmp, f"part-{s:05d}.{file_format}")
            write(path, recs)
            upload(bucket, f"{folder}/part-{s:05d}.{file_format}", path)
            everything += recs
    return f"{scheme}://{bucket}/{folder}/part-*.{file_format}", everything


if __name__ == "__main__":
    # `python tests/gcs_emulator.py UPSTREAM_PORT LATENCY_S MBPS`: a shaping proxy in its own
    # process (for benchmarks/gcs.py); prints its port, serves until killed or orphaned.
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    proxy = FaultProxy(int(sys.argv[1]))
    proxy.set_faults(latency_s=float(sys.argv[2]), mbps=float(sys.argv[3]) or None)
    print(proxy.port, flush=True)
    threading.Event().wait()
