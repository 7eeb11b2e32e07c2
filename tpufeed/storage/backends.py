"""The object stores tpufeed reads, by URL scheme: the one place that knows which exist.

Each backend is a module of `storage.stores` with the same five functions over `RemoteObject`s
(`gcs` for `gs://`, `s3` for `s3://`, `web` for `https://` and `http://`, `hub` for the Hugging
Face Hub's `hf://datasets/...`): `list_objects` (one object, or a glob's matches sorted by
name), `list_prefix`, `stat`, `read_range` (bytes of one version, or `ObjectChangedError`) and
`fetch_into`. Every caller outside `tpufeed.storage` goes through the functions here, so a new
store is a new module and a line in `BACKENDS`. A backend module and its client library load on
first use of its scheme.

>>> is_remote_url("s3://bucket/train-*.tfrecord"), is_remote_url("/data/train.tfrecord")
(True, False)
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.retry import RetryPolicy

__all__ = [
    "BACKENDS",
    "RemoteObject",
    "fetch_into",
    "is_remote_url",
    "list_objects",
    "list_prefix",
    "read_range",
    "scheme_of",
    "schemes",
    "stat",
]

# scheme -> the module that implements it
BACKENDS: dict[str, str] = {
    "gs": "tpufeed.storage.stores.gcs",
    "s3": "tpufeed.storage.stores.s3",
    "https": "tpufeed.storage.stores.web",
    "http": "tpufeed.storage.stores.web",
    "hf": "tpufeed.storage.stores.hub",
}


def scheme_of(path: object) -> str | None:
    """The registered scheme of a URL (`"gs"`, `"s3"`, `"https"`...), or None for a local path."""
    if not isinstance(path, str):
        return None
    scheme, sep, _ = path.partition("://")
    return scheme if sep and scheme in BACKENDS else None


def is_remote_url(path: object) -> bool:
    """Whether `path` is a URL of a registered object store (a local path or os.PathLike is not)."""
    return scheme_of(path) is not None


def schemes() -> str:
    """The registered schemes, for messages: 'gs://, s3://, https://, http://, hf://'."""
    return ", ".join(f"{s}://" for s in BACKENDS)


def _backend(scheme: str | None, what: object) -> ModuleType:
    if scheme is None or scheme not in BACKENDS:
        from tpufeed.errors import InvalidArgumentError

        raise InvalidArgumentError(f"{what!r} is not a URL of an object store ({schemes()})")
    return importlib.import_module(BACKENDS[scheme])


def _policy(policy: RetryPolicy | None) -> RetryPolicy:
    return policy if policy is not None else RetryPolicy()


def list_objects(pattern: str, policy: RetryPolicy | None = None) -> list[RemoteObject]:
    """The objects a URL names: one object, or a glob's matches sorted by name (at least one)."""
    objects: list[RemoteObject] = _backend(scheme_of(pattern), pattern).list_objects(
        pattern, _policy(policy)
    )
    return objects


def list_prefix(url: str, policy: RetryPolicy | None = None) -> list[RemoteObject]:
    """Every object whose URL starts with `url`, sorted by name (no glob characters here)."""
    objects: list[RemoteObject] = _backend(scheme_of(url), url).list_prefix(url, _policy(policy))
    return objects


def stat(url: str, policy: RetryPolicy | None = None) -> RemoteObject:
    """The current version of the object at `url` (SourceNotFoundError naming it if none)."""
    obj: RemoteObject = _backend(scheme_of(url), url).stat(url, _policy(policy))
    return obj


def read_range(obj: RemoteObject, start: int, end: int, policy: RetryPolicy | None = None) -> bytes:
    """Bytes [start, end) of that version of `obj` (ObjectChangedError if it was replaced)."""
    data: bytes = _backend(obj.scheme, obj.url).read_range(obj, start, end, _policy(policy))
    return data


def fetch_into(
    obj: RemoteObject, start: int, end: int, fd: int, policy: RetryPolicy | None = None
) -> None:
    """Writes bytes [start, end) of `obj` into `fd` at the same offsets."""
    _backend(obj.scheme, obj.url).fetch_into(obj, start, end, fd, _policy(policy))


def write_whole(fd: int, data: bytes, offset: int) -> None:
    """Writes all of `data` into `fd` at `offset` (what a backend's `fetch_into` ends with)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        offset += written
        view = view[written:]
