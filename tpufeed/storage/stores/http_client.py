"""HTTP/1.1 requests for the stores that speak plain HTTP (http://, https://, the Hugging Face
Hub): keep-alive connections per host, thread and process; redirects followed; every failure
as something `storage.retry` sorts (an unexpected status is an `HttpStatusError`, its `code`
the status).

The standard library's `http.client`, so https:// needs no extra. Certificates are checked
against the system's CAs (`SSL_CERT_FILE` / `SSL_CERT_DIR` name others, as OpenSSL reads them).
An `Authorization` header goes only to the host it was meant for: a redirect to another host
(the Hub's CDN) drops it, as browsers and `requests` do. Requests go straight to the server
(no HTTP proxy). Each request waits at most `timeout` seconds to connect and between bytes.

>>> request("GET", "https://host/x.parquet", {"Range": "bytes=0-3"}, 10.0).body  # doctest: +SKIP
b'PAR1'
"""

from __future__ import annotations

import http.client
import os
import select
import ssl
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from email.message import Message
from urllib.parse import urljoin, urlsplit

from tpufeed.errors import InvalidArgumentError

__all__ = ["Answer", "HttpStatusError", "request"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10
_ERROR_BODY = 4096  # what an error answer's body may add to its message
USER_AGENT = "tpufeed"


class HttpStatusError(OSError):
    """An answer whose status the caller did not ask for; `code` is the status (what
    `storage.retry.status_of` reads), `detail` the start of the answer's body."""

    def __init__(self, status: int, reason: str, url: str, detail: str = ""):
        said = f": {detail}" if detail else ""
        super().__init__(f"HTTP {status} {reason} from {_plain(url)}{said}")
        self.code = status
        self.url = url
        self.detail = detail


@dataclass(frozen=True)
class Answer:
    """A response read whole: its status, headers and body, the URL that gave it (after
    redirects), and the headers of each redirect followed to it, first first."""

    status: int
    headers: Message
    body: bytes
    url: str
    hops: tuple[Message, ...] = ()

    def first(self, name: str) -> str | None:
        """Header `name` as the first server asked answered it (a redirect's, else this)."""
        for headers in (*self.hops, self.headers):
            value = headers.get(name)
            if value is not None:
                return value
        return None


def request(
    method: str,
    url: str,
    headers: Mapping[str, str],
    timeout: float,
    ok: Collection[int] = (200, 206),
    limit: int | None = None,
) -> Answer:
    """`method` on `url`, redirects followed: the answer if its status is in `ok`, else
    `HttpStatusError`. `limit` caps the body's size (a bigger one is an `HttpStatusError` 413
    of this client's own: a listing or an error page never fills memory)."""
    sent = {"User-Agent": USER_AGENT, **headers}
    hops: list[Message] = []
    for _ in range(_MAX_REDIRECTS + 1):
        connection, target = _connection(url, timeout)
        try:
            connection.request(method, target, headers=sent)
            response = connection.getresponse()
            location = response.getheader("Location")
            if response.status in _REDIRECTS and location:
                response.read(_ERROR_BODY)
                _release(connection, response, url)
                hops.append(response.msg)
                url, sent = _redirected(url, urljoin(url, location), sent)
                continue
            if response.status not in ok:
                detail = response.read(_ERROR_BODY).decode("utf-8", "replace").strip()
                _forget(url)
                raise HttpStatusError(response.status, response.reason, url, detail[:300])
            body = b"" if method == "HEAD" else _body(response, url, limit)
            _release(connection, response, url)
            return Answer(response.status, response.msg, body, url, tuple(hops))
        except BaseException:
            _forget(url)
            raise
    raise HttpStatusError(310, "Too many redirects", url, f"more than {_MAX_REDIRECTS}")


def _body(response: http.client.HTTPResponse, url: str, limit: int | None) -> bytes:
    length = response.getheader("Content-Length")
    if limit is not None and length is not None and length.isdigit() and int(length) > limit:
        raise HttpStatusError(413, "Body too large", url, f"{length} bytes, over {limit:,}")
    body = response.read() if limit is None else response.read(limit + 1)
    if limit is not None and len(body) > limit:
        raise HttpStatusError(413, "Body too large", url, f"over {limit:,} bytes")
    return body


def _redirected(old: str, new: str, sent: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The next URL and headers: credentials stay with the host they were sent to."""
    if urlsplit(new).scheme not in ("http", "https"):
        raise InvalidArgumentError(f"{_plain(old)} redirects to {_plain(new)}, not an http(s) URL")
    if urlsplit(new).netloc != urlsplit(old).netloc:
        sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
    return new, sent


def _plain(url: str) -> str:
    """`url` without its query (a signed URL's query is a credential)."""
    return url.split("?", 1)[0]


# -- connections -------------------------------------------------------------------------------

_local = threading.local()
_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def _tls() -> ssl.SSLContext:
    """The TLS settings for the CAs the environment names now (one context per choice)."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _contexts_lock:
        if key not in _contexts:
            _contexts[key] = ssl.create_default_context()
        return _contexts[key]


def _open(url: str) -> dict[tuple[int, str, str], http.client.HTTPConnection]:
    """This thread's connections in this process (a forked child's start empty: the parent's
    sockets are the parent's)."""
    pid = os.getpid()
    if getattr(_local, "pid", None) != pid:
        _local.pid, _local.connections = pid, {}
    connections: dict[tuple[int, str, str], http.client.HTTPConnection] = _local.connections
    return connections


def _key(url: str) -> tuple[int, str, str]:
    parts = urlsplit(url)
    return os.getpid(), parts.scheme, parts.netloc


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection to `url`'s host (kept from an earlier request if the server has not
    closed it) set to wait `timeout` s, and the request target."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(f"not an http(s) URL: {_plain(url)!r}")
    connections = _open(url)
    key = _key(url)
    connection = connections.get(key)
    if connection is not None and not _alive(connection):
        connection.close()
        connection = None
    if connection is None:
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=timeout, context=_tls()
            )
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        connections[key] = connection
    connection.timeout = timeout
    if connection.sock is not None:
        connection.sock.settimeout(timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return connection, target


def _alive(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept connection can take a request: a socket with something to read before
    anything was asked has been closed by the server (or is out of step)."""
    sock = connection.sock
    if sock is None:
        return True
    poller = select.poll()  # not select(): descriptors past 1024 are fine
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def _release(
    connection: http.client.HTTPConnection, response: http.client.HTTPResponse, url: str
) -> None:
    """Keeps the connection for the next request, unless the answer ended it."""
    if response.will_close or not response.isclosed():
        _forget(url)


def _forget(url: str) -> None:
    """Closes this thread's connection to `url`'s host (after a failure it is out of step)."""
    connection = _open(url).pop(_key(url), None)
    if connection is not None:
        connection.close()
