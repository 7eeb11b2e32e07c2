"""http:// and https:// files on web servers: each one named by its URL, read by byte ranges.

A web server lists no folder, so these URLs name files one by one (a list of them; a glob is
refused, and `hf://` reads the Hugging Face Hub, whose listing globs go through). Opening a file
is one ranged GET of its first byte: its size (`Content-Range`) and its version, the `ETag`, or
the `Last-Modified` time where the server sends no ETag; a server that sends neither, or that
answers a range with the whole file, is refused by name. Every later read names that version
(`If-Match` the ETag, `If-Unmodified-Since` the time) and checks the answer's version and size:
a file replaced while a job runs raises `ObjectChangedError` naming both versions instead of
mixing two files. Copies in the shard cache are checked by the CRC32C of their first copy
(fetched whole under that pin), as S3 objects without a checksum are.

Requests go through `storage.stores.http_client`, and each call retries transient failures
(`storage.retry`: 408, 429, 5xx, resets, dropped bodies, timeouts) under the source's policy.

>>> stat("https://host/data/train-00000.parquet").size  # doctest: +SKIP
52428800
"""

from __future__ import annotations

from datetime import datetime, timezone
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import urlsplit

from tpufeed.errors import (
    InvalidArgumentError,
    ObjectChangedError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.observe import counts
from tpufeed.storage.objects import GLOB_CHARS, RemoteObject, changed_message
from tpufeed.storage.retry import RetryPolicy, ShortReadError, call_with_retry, status_of
from tpufeed.storage.stores.http_client import Answer, HttpStatusError, request

__all__ = [
    "fetch_into",
    "list_objects",
    "list_prefix",
    "ranged_get",
    "read_range",
    "stat",
    "total_size",
]

IDENTITY = {"Accept-Encoding": "identity"}  # ranges count stored bytes: nothing re-encoded


def split(url: str) -> tuple[str, str, str]:
    """(scheme, host[:port], path and query without the leading /) of an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(f"{url!r} does not name a host (https://HOST/PATH)")
    name = parts.path.lstrip("/") + (f"?{parts.query}" if parts.query else "")
    if not name or name.endswith("/"):
        raise InvalidArgumentError(f"{url} names no file: a web server lists no folder")
    return parts.scheme, parts.netloc, name


def list_objects(pattern: str, policy: RetryPolicy) -> list[RemoteObject]:
    """The one file an http(s) URL names (a glob is refused: a web server lists nothing)."""
    if GLOB_CHARS.intersection(urlsplit(pattern).path):
        raise InvalidArgumentError(
            f"{pattern}: a web server lists no folder, so an http(s):// path cannot be a glob; "
            "pass a list of URLs, one a file (the Hugging Face Hub's files glob through "
            "hf://datasets/ORG/NAME/PATH)"
        )
    return [stat(pattern, policy)]


def list_prefix(url: str, policy: RetryPolicy) -> list[RemoteObject]:
    """Refused: a folder on a web server cannot be listed."""
    raise InvalidArgumentError(
        f"{url}: a folder on a web server cannot be listed; a dataset that is a folder (MDS, "
        "a built dataset) needs a store that lists (gs://, s3://, hf://datasets/...)"
    )


def stat(url: str, policy: RetryPolicy) -> RemoteObject:
    """The file at an http(s) URL now: its size and version, from a ranged GET of one byte."""
    scheme, host, name = split(url)

    def probe(timeout: float) -> RemoteObject:
        answer = _first_byte(url, timeout)
        etag, modified = answer.headers.get("ETag"), answer.headers.get("Last-Modified")
        if not etag and not modified:
            raise SourceError(
                f"{url}: the server sends neither an ETag nor a Last-Modified time, so a "
                "replaced file could not be told from the one first read; serve it from a "
                "server that sends one (nginx, a bucket, a CDN)",
                path=url,
            )
        generation = _micros(modified) if modified else 0
        size = total_size(answer, url) if answer.status == 206 else 0
        return RemoteObject(host, name, size, generation, None, scheme, etag or None)

    return call_with_retry(probe, url, "reading the file's size and version", policy)


class _WholeFile(SourceError):
    """A server answered a byte range with the whole file."""


def _first_byte(url: str, timeout: float) -> Answer:
    """The answer to a GET of the first byte (206), or for an empty file (a 416, or a 200 of
    no bytes) the answer to a HEAD, whose headers give its version."""
    try:
        answer = ranged_get(url, 0, 1, IDENTITY, timeout, empty_ok=True)
        if answer.status == 206:
            return answer
    except _WholeFile:
        answer = request("HEAD", url, IDENTITY, timeout, ok=(200,))
        if answer.headers.get("Content-Length") != "0":
            raise
        return answer
    answer = request("HEAD", url, IDENTITY, timeout, ok=(200,))
    return Answer(416, answer.headers, b"", answer.url, answer.hops)


def ranged_get(
    url: str,
    start: int,
    end: int,
    headers: dict[str, str],
    timeout: float,
    empty_ok: bool = False,
) -> Answer:
    """The answer to a GET of bytes [start, end) (`empty_ok`: of an empty file too, which
    answers 416); a server that answers with the whole file is refused by name."""
    ranged = {**headers, "Range": f"bytes={start}-{end - 1}"}
    try:
        return request("GET", url, ranged, timeout, ok=(206, 416) if empty_ok else (206,))
    except HttpStatusError as error:
        if error.code != 200:
            raise
        raise _WholeFile(
            f"{url}: the server answered a byte range with the whole file (HTTP 200); tpufeed "
            "reads remote files by ranges: serve them from a server that takes `Range` "
            "(nginx, Apache, a bucket, a CDN)",
            path=url,
        ) from None


def total_size(answer: Answer, url: str) -> int:
    """The file's whole size, from a ranged answer's `Content-Range` ("bytes 0-0/1234")."""
    declared = (answer.headers.get("Content-Range") or "").rpartition("/")[2].strip()
    if answer.status != 206 or not declared.isdigit():
        raise SourceError(
            f"{url}: the server's answer to a byte range gives no size "
            f"(Content-Range {answer.headers.get('Content-Range')!r}, HTTP {answer.status})",
            path=url,
        )
    return int(declared)


def _micros(http_date: str) -> int:
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return 0
    return int(when.timestamp() * 1_000_000)


def _http_date(micros: int) -> str:
    return format_datetime(datetime.fromtimestamp(micros / 1e6, timezone.utc), usegmt=True)


def _strong(etag: str | None) -> bool:
    return bool(etag) and not etag.startswith("W/")  # type: ignore[union-attr]


def version_of(obj: RemoteObject) -> str:
    """How messages name the version a file was pinned at."""
    if obj.etag:
        return f"ETag {obj.etag}"
    return f"Last-Modified {_http_date(obj.generation)}, {obj.size:,} bytes"


def _pins(obj: RemoteObject) -> dict[str, str]:
    """Headers that make the server refuse (412) a read of another version than `obj`'s."""
    if _strong(obj.etag):
        return {"If-Match": obj.etag}  # type: ignore[dict-item]
    if obj.etag is None and obj.generation:
        return {"If-Unmodified-Since": _http_date(obj.generation)}
    return {}


def _served(obj: RemoteObject, answer: Answer) -> str | None:
    """The other version the answer is of, if it is not `obj`'s (None: the same)."""
    etag, modified = answer.headers.get("ETag"), answer.headers.get("Last-Modified")
    size = total_size(answer, obj.url)
    if obj.etag and etag and etag.removeprefix("W/") != obj.etag.removeprefix("W/"):
        return f"ETag {etag}"
    if obj.etag is None and modified and _micros(modified) != obj.generation:
        return f"Last-Modified {modified}"
    if size != obj.size:
        return f"{size:,} bytes"
    return None


def read_range(obj: RemoteObject, start: int, end: int, policy: RetryPolicy) -> bytes:
    """Bytes [start, end) of `obj`'s version, retried until whole."""
    if not 0 <= start < end <= obj.size:
        raise InvalidArgumentError(
            f"{obj.url}: byte range [{start}, {end}) is outside its {obj.size} bytes"
        )
    headers = {**IDENTITY, **_pins(obj)}

    def get(timeout: float) -> bytes:
        answer = ranged_get(obj.url, start, end, headers, timeout)
        counts.count("http_bytes", len(answer.body))
        other = _served(obj, answer)
        if other is not None:
            raise ObjectChangedError(_changed(obj, other), path=obj.url)
        if len(answer.body) != end - start:
            raise ShortReadError(f"got {len(answer.body)} of {end - start} bytes")
        return answer.body

    try:
        return call_with_retry(get, obj.url, f"reading bytes [{start}, {end})", policy)
    except SourceError as e:
        if status_of(e.__cause__ or e) in (404, 410, 412):
            raise _gone_or(e, obj, policy) from e
        raise


def _changed(obj: RemoteObject, now: str | None) -> str:
    return changed_message(obj.url, version_of(obj), now, "URLs that name the version")


def _gone_or(error: SourceError, obj: RemoteObject, policy: RetryPolicy) -> SourceError:
    """The error for a read of `obj` refused as absent (404, 410) or as another version (412):
    ObjectChangedError when the file changed, else `error`."""
    try:
        now = stat(obj.url, policy)
    except SourceNotFoundError:
        return ObjectChangedError(_changed(obj, None), path=obj.url)
    if (now.etag, now.generation, now.size) == (obj.etag, obj.generation, obj.size):
        return error
    return ObjectChangedError(_changed(obj, version_of(now)), path=obj.url)


def fetch_into(obj: RemoteObject, start: int, end: int, fd: int, policy: RetryPolicy) -> None:
    """Writes bytes [start, end) of `obj` into `fd` at the same offsets (one retried GET)."""
    from tpufeed.storage.backends import write_whole

    write_whole(fd, read_range(obj, start, end, policy), start)
