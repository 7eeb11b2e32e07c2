"""gs:// objects through google-cloud-storage: listing and globs, metadata, ranged reads.

Credentials are Application Default Credentials, or anonymous when `STORAGE_EMULATOR_HOST` is
set (the client then talks to that emulator). Every call retries transient failures
(`tpufeed.storage.retry`). Reads name an object *generation*, the one listed when the source
was opened, so an object replaced or deleted in the bucket while a job runs raises
`ObjectChangedError` naming both generations instead of mixing two versions: GCS answers a read
of a generation that is gone with 404 (412 for a failed precondition), and a server that serves
another generation says so in `x-goog-generation`.

>>> [o.url for o in list_objects("gs://bucket/train-*.array_record")]  # doctest: +SKIP
['gs://bucket/train-00000.array_record', 'gs://bucket/train-00001.array_record']
"""

from __future__ import annotations

import base64
import os
import re
import threading
from typing import Any

from tpufeed.errors import (
    InvalidArgumentError,
    ObjectChangedError,
    SourceError,
    SourceNotFoundError,
    missing_dependency,
)
from tpufeed.observe import counts
from tpufeed.storage.objects import (
    GLOB_CHARS,
    RemoteObject,
    changed_message,
    glob_regex,
    glob_split,
)
from tpufeed.storage.objects import split_url as _split_url
from tpufeed.storage.retry import RetryPolicy, ShortReadError, call_with_retry, status_of

__all__ = [
    "GcsObject",
    "fetch_into",
    "is_gcs_url",
    "list_objects",
    "list_prefix",
    "read_range",
    "stat",
]

SCHEME = "gs://"
GcsObject = RemoteObject  # the name this module gave it first (scheme "gs", the default)
_glob_regex = glob_regex
# Connections kept per host: parallel downloads and ranges share one pool.
_POOL_SIZE = 64
DEFAULT_POLICY = RetryPolicy()


def is_gcs_url(path: object) -> bool:
    return isinstance(path, str) and path.startswith(SCHEME)


def split_url(url: str) -> tuple[str, str]:
    """(bucket, object name) of a gs:// URL; the name may be empty (a bucket) or a glob."""
    return _split_url(url, "gs")


# -- the client ------------------------------------------------------------------------------

_clients: dict[tuple[int, str | None], Any] = {}
_clients_lock = threading.Lock()


def client() -> Any:
    """This process's storage client, made on first use: one per pid (a forked child must not
    share sockets) and per `STORAGE_EMULATOR_HOST` value."""
    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"))
    found = _clients.get(key)
    if found is not None:
        return found
    with _clients_lock:
        if key not in _clients:
            _clients[key] = _new_client()
        return _clients[key]


def _new_client() -> Any:
    try:
        import google.cloud.storage as storage
        from google.auth.credentials import AnonymousCredentials, Credentials
        from google.auth.transport.requests import AuthorizedSession
        from requests.adapters import HTTPAdapter
    except ImportError as e:
        raise missing_dependency("google-cloud-storage", "gcs") from e
    credentials: Credentials
    project: str | None
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        credentials, project = AnonymousCredentials(), "tpufeed-emulator"
    else:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, project = google.auth.default(
                scopes=["https://www.googleapis.com/auth/devstorage.read_only"]
            )
        except DefaultCredentialsError as e:
            raise SourceError(
                "gs:// paths need Google Cloud credentials and none were found: run `gcloud auth "
                "application-default login`, or run on a VM with a service account "
                f"({type(e).__name__})"
            ) from None
    session = AuthorizedSession(credentials)
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=_POOL_SIZE, max_retries=0)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return storage.Client(project=project, credentials=credentials, _http=session)


# -- listing ---------------------------------------------------------------------------------


def list_objects(pattern: str, policy: RetryPolicy = DEFAULT_POLICY) -> list[GcsObject]:
    """The objects a gs:// URL names: one object, or a glob's matches sorted by name.

    `*` and `?` do not cross `/`, as in a local glob; `**` does. GCS matches the glob itself
    where its syntax means the same (`server_glob`), so only the matches travel; every name
    listed is matched here too, so the result is the same with any server.
    """
    bucket, name = split_url(pattern)
    if not name:
        raise InvalidArgumentError(
            f"{pattern} is a bucket; pass objects or a glob such as '{pattern.rstrip('/')}/*'"
        )
    if not GLOB_CHARS.intersection(name):
        return [stat_object(bucket, name, policy)]
    prefix, matcher, recursive = glob_split(name)
    server = server_glob(name)
    listed = call_with_retry(
        lambda timeout: _list(bucket, prefix, recursive, timeout, server),
        pattern,
        "listing objects",
        policy,
    )
    found = sorted((o for o in listed if matcher.fullmatch(o.name)), key=lambda o: o.name)
    if not found:
        raise SourceNotFoundError(f"no object matches the glob {pattern!r}", path=pattern)
    return found


def list_prefix(url: str, policy: RetryPolicy = DEFAULT_POLICY) -> list[GcsObject]:
    """Every object whose URL starts with `url`, sorted by name, in one (paged) listing.

    Nothing is a glob here: `*`, `?` and `[` are plain characters, as in an object's own name.
    """
    bucket, prefix = split_url(url)
    listed = call_with_retry(
        lambda timeout: _list(bucket, prefix, True, timeout), url, "listing objects", policy
    )
    return sorted(listed, key=lambda o: o.name)


def stat(url: str, policy: RetryPolicy = DEFAULT_POLICY) -> GcsObject:
    """The current generation of the object at a gs:// URL."""
    return stat_object(*split_url(url), policy)


def stat_object(bucket: str, name: str, policy: RetryPolicy = DEFAULT_POLICY) -> GcsObject:
    url = f"{SCHEME}{bucket}/{name}"
    if name.endswith("/"):
        raise InvalidArgumentError(f"{url} is a folder; pass objects or a glob such as '{url}*'")

    def get(timeout: float) -> GcsObject:
        blob = client().bucket(bucket).get_blob(name, retry=None, timeout=timeout)
        if blob is None:  # google-cloud-storage is there: the client above needs it
            from google.api_core.exceptions import NotFound

            raise NotFound(f"no such object: {url}")
        return _object(blob)

    return call_with_retry(get, url, "reading object metadata", policy)


def _list(
    bucket: str, prefix: str, recursive: bool, timeout: float, match_glob: str | None = None
) -> list[GcsObject]:
    blobs = client().list_blobs(
        bucket,
        prefix=prefix,
        delimiter=None if recursive else "/",
        match_glob=match_glob,
        retry=None,
        timeout=timeout,
    )
    return [_object(b) for b in blobs if not b.name.endswith("/")]


def _object(blob: Any) -> GcsObject:
    crc = None
    if blob.crc32c:
        crc = int.from_bytes(base64.b64decode(blob.crc32c), "big")
    return GcsObject(
        blob.bucket.name, blob.name, int(blob.size or 0), int(blob.generation or 0), crc
    )


# What GCS's `matchGlob` is sent: `*`, `**` and `?` as here, and classes of letters, digits,
# `_` and `.` (`[0-9]`, `[ab_]`). Anything else (`\\`, braces, `[!...]`, `***`, a reversed
# range, other characters in a class) GCS reads otherwise or refuses: matched here alone.
_SERVER_GLOB = re.compile(r"(?:[^\\{}\[\]*?]|\*\*?(?!\*)|\?|\[(?:[\w.](?:-[\w.])?)+\])+", re.ASCII)


def server_glob(name: str) -> str | None:
    """`name` as GCS's `matchGlob`, where GCS matches every object that `_glob_regex` does
    (it may match more: a `**/` also matches no folder); else None (listed by prefix)."""
    if not _SERVER_GLOB.fullmatch(name):
        return None
    ranges = (r for c in re.findall(r"\[([^\]]*)\]", name) for r in re.findall(r"(.)-(.)", c))
    return name if all(low <= high for low, high in ranges) else None


# -- reads -----------------------------------------------------------------------------------


def _blob(obj: GcsObject) -> Any:
    return client().bucket(obj.bucket).blob(obj.name, generation=obj.generation or None)


def read_range(obj: GcsObject, start: int, end: int, policy: RetryPolicy = DEFAULT_POLICY) -> bytes:
    """Bytes [start, end) of `obj`, retried until whole (a short answer is retried too)."""
    if not 0 <= start < end <= obj.size:
        raise InvalidArgumentError(
            f"{obj.url}: byte range [{start}, {end}) is outside its {obj.size} bytes"
        )

    def get(timeout: float) -> bytes:
        blob = _blob(obj)
        # An explicit range always: some servers answer a suffix range with the whole object.
        data = blob.download_as_bytes(
            start=start,
            end=end - 1,
            raw_download=True,
            checksum=None,
            retry=None,
            timeout=timeout,
            single_shot_download=True,
        )
        counts.count("gcs_bytes", len(data))
        served = int(blob.generation or 0)
        if obj.generation and served and served != obj.generation:
            raise ObjectChangedError(_changed(obj, served), path=obj.url)
        if len(data) != end - start:
            raise ShortReadError(f"got {len(data)} of {end - start} bytes")
        return data

    try:
        return call_with_retry(get, obj.url, f"reading bytes [{start}, {end})", policy)
    except SourceError as e:
        if obj.generation and status_of(e.__cause__ or e) in (404, 412):
            raise _gone_or(e, obj, policy) from e
        raise


def _changed(obj: GcsObject, now: int | None) -> str:
    return changed_message(obj.url, f"generation {obj.generation}", now, "object versioning")


def _gone_or(error: SourceError, obj: GcsObject, policy: RetryPolicy) -> SourceError:
    """The error for a read of `obj`'s generation refused as absent (404) or as a failed
    precondition (412): ObjectChangedError when the object changed, else `error`."""
    try:
        now: int | None = stat_object(obj.bucket, obj.name, policy).generation
    except SourceNotFoundError:
        now = None
    if now == obj.generation:
        return error
    return ObjectChangedError(_changed(obj, now), path=obj.url)


def fetch_into(
    obj: GcsObject, start: int, end: int, fd: int, policy: RetryPolicy = DEFAULT_POLICY
) -> None:
    """Writes bytes [start, end) of `obj` into `fd` at the same offsets (one retried GET).

    The part is read whole, then written: streaming it through the client's 8 KiB chunks costs
    more CPU than the transfer itself.
    """
    from tpufeed.storage.backends import write_whole

    write_whole(fd, read_range(obj, start, end, policy), start)
