"""s3:// objects through boto3: listing and globs, metadata, ranged reads; S3-compatible stores
(MinIO, Cloudflare R2, Ceph...) through an endpoint URL.

Credentials, region and endpoint are boto3's own: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`,
`AWS_PROFILE`, the instance's role; `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`) names an
S3-compatible store. Every call retries transient failures (`tpufeed.storage.retry`; boto3's
own retries are off, so that one policy bounds the call). An object is pinned by the ETag
listed when the source was opened (and its VersionId where a metadata read found one): every
ranged read sends `If-Match`, so an object replaced or deleted while a job runs raises
`ObjectChangedError` naming both ETags instead of mixing two versions. A whole-object
`ChecksumCRC32C` (objects uploaded with one) is what the shard cache checks its copy against;
without it, its first copy is checked by its size (every byte of it came under `If-Match`), and
later ones against the CRC32C that first copy had.

>>> [o.url for o in list_objects("s3://bucket/train-*.tfrecord")]  # doctest: +SKIP
['s3://bucket/train-00000.tfrecord', 's3://bucket/train-00001.tfrecord']
"""

from __future__ import annotations

import base64
import math
import os
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

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
    glob_split,
    split_url,
)
from tpufeed.storage.retry import RetryPolicy, ShortReadError, call_with_retry, status_of
from tpufeed.storage.stores.s3_endpoint import endpoint_settings
from tpufeed.storage.threads import map_in_threads

__all__ = ["fetch_into", "list_objects", "list_prefix", "read_range", "stat"]

SCHEME = "s3://"
_POOL_SIZE = 64  # connections kept per client: parallel downloads and ranges share one pool
_HEAD_THREADS = 16
T = TypeVar("T")

NO_CREDENTIALS = (
    "s3:// paths need AWS credentials and none were found: set AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or run with an instance role); for an S3-compatible "
    "store also set AWS_ENDPOINT_URL_S3 to its URL"
)


# -- the client ------------------------------------------------------------------------------

_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()


def client(timeout: float) -> Any:
    """This process's S3 client for requests that may wait `timeout` s: one per pid (a forked
    child must not share sockets), per endpoint setting, and per timeout rounded down to a power
    of two (boto3 sets timeouts per client; a request never waits longer than asked)."""
    bucketed = 2.0 ** math.floor(math.log2(max(timeout, 1 / 16)))
    key = (os.getpid(), bucketed, *endpoint_settings())
    found = _clients.get(key)
    if found is not None:
        return found
    with _clients_lock:
        if key not in _clients:
            _clients[key] = _new_client(bucketed)
        return _clients[key]


def _new_client(timeout: float) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as e:
        raise missing_dependency("boto3", "s3") from e
    config = Config(
        connect_timeout=timeout,
        read_timeout=timeout,
        retries={"total_max_attempts": 1},  # tpufeed.storage.retry retries
        max_pool_connections=_POOL_SIZE,
    )
    return boto3.session.Session().client("s3", config=config)


def _calling(fn: Callable[[float], T], url: str) -> Callable[[float], T]:
    """`fn` with botocore's "no credentials" as the SourceError that says what to set."""

    def call(timeout: float) -> T:
        from botocore.exceptions import NoCredentialsError

        try:
            return fn(timeout)
        except NoCredentialsError:
            raise SourceError(f"{url}: {NO_CREDENTIALS}", path=url) from None

    return call


# -- listing ---------------------------------------------------------------------------------


def list_objects(pattern: str, policy: RetryPolicy) -> list[RemoteObject]:
    """The objects an s3:// URL names: one object, or a glob's matches sorted by name.

    `*` and `?` do not cross `/`, as in a local glob; `**` does. S3 lists by prefix only: the
    names listed are matched here.
    """
    bucket, name = split_url(pattern, "s3")
    if not name:
        raise InvalidArgumentError(
            f"{pattern} is a bucket; pass objects or a glob such as '{pattern.rstrip('/')}/*'"
        )
    if not GLOB_CHARS.intersection(name):
        return [stat(pattern, policy)]
    prefix, matcher, recursive = glob_split(name)
    listed = call_with_retry(
        _calling(lambda timeout: _list(bucket, prefix, recursive, timeout), pattern),
        pattern,
        "listing objects",
        policy,
    )
    found = [key for key in listed if matcher.fullmatch(key["Key"])]
    if not found:
        raise SourceNotFoundError(f"no object matches the glob {pattern!r}", path=pattern)
    return _objects(bucket, found, policy)


def list_prefix(url: str, policy: RetryPolicy) -> list[RemoteObject]:
    """Every object whose URL starts with `url`, sorted by name, in one (paged) listing."""
    bucket, prefix = split_url(url, "s3")
    listed = call_with_retry(
        _calling(lambda timeout: _list(bucket, prefix, True, timeout), url),
        url,
        "listing objects",
        policy,
    )
    return _objects(bucket, listed, policy)


def _list(bucket: str, prefix: str, recursive: bool, timeout: float) -> list[dict]:
    pages = (
        client(timeout)
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix=prefix, **({} if recursive else {"Delimiter": "/"}))
    )
    return [c for page in pages for c in page.get("Contents", ()) if not c["Key"].endswith("/")]


def _objects(bucket: str, listed: list[dict], policy: RetryPolicy) -> list[RemoteObject]:
    """The listed keys as objects, sorted by name. A listing names an object's checksum
    algorithms but not their values: those with a CRC32C are read by a metadata request."""
    listed = sorted(listed, key=lambda c: c["Key"])
    with_crc = [c["Key"] for c in listed if "CRC32C" in c.get("ChecksumAlgorithm", ())]
    headed = map_in_threads(
        lambda key: stat(f"{SCHEME}{bucket}/{key}", policy), with_crc, _HEAD_THREADS
    )
    by_key = {obj.name: obj for obj in headed}
    return [
        by_key.get(c["Key"])
        or _object(bucket, c["Key"], c["Size"], c["LastModified"], c["ETag"], None, None)
        for c in listed
    ]


def stat(url: str, policy: RetryPolicy) -> RemoteObject:
    """The current version of the object at an s3:// URL (one metadata request)."""
    bucket, name = split_url(url, "s3")
    if not name or name.endswith("/"):
        raise InvalidArgumentError(f"{url} is a folder; pass objects or a glob such as '{url}*'")

    def head(timeout: float) -> RemoteObject:
        meta = client(timeout).head_object(Bucket=bucket, Key=name, ChecksumMode="ENABLED")
        whole = meta.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT"
        crc = meta.get("ChecksumCRC32C") if whole else None
        return _object(
            bucket,
            name,
            meta["ContentLength"],
            meta["LastModified"],
            meta["ETag"],
            meta.get("VersionId"),
            crc,
        )

    return call_with_retry(_calling(head, url), url, "reading object metadata", policy)


def _object(
    bucket: str,
    name: str,
    size: int,
    modified: datetime,
    etag: str,
    version_id: str | None,
    crc32c: str | None,
) -> RemoteObject:
    crc = None
    if crc32c and "-" not in crc32c:  # "...-N" is a checksum of the parts' checksums
        crc = int.from_bytes(base64.b64decode(crc32c), "big")
    micros = int(modified.timestamp() * 1_000_000)
    version = None if version_id in (None, "null") else version_id
    return RemoteObject(bucket, name, int(size), micros, crc, "s3", etag, version)


# -- reads -----------------------------------------------------------------------------------


def read_range(obj: RemoteObject, start: int, end: int, policy: RetryPolicy) -> bytes:
    """Bytes [start, end) of `obj`'s version (If-Match its ETag), retried until whole."""
    if not 0 <= start < end <= obj.size:
        raise InvalidArgumentError(
            f"{obj.url}: byte range [{start}, {end}) is outside its {obj.size} bytes"
        )
    pinned: dict[str, str] = {"IfMatch": obj.etag} if obj.etag else {}
    if obj.version_id:
        pinned["VersionId"] = obj.version_id

    def get(timeout: float) -> bytes:
        response = client(timeout).get_object(
            Bucket=obj.bucket, Key=obj.name, Range=f"bytes={start}-{end - 1}", **pinned
        )
        data = response["Body"].read()
        counts.count("s3_bytes", len(data))
        served = response.get("ETag")
        if obj.etag and served and served != obj.etag:
            raise ObjectChangedError(_changed(obj, served), path=obj.url)
        if len(data) != end - start:
            raise ShortReadError(f"got {len(data)} of {end - start} bytes")
        return data

    try:
        what = f"reading bytes [{start}, {end})"
        return call_with_retry(_calling(get, obj.url), obj.url, what, policy)
    except SourceError as e:
        if obj.etag and status_of(e.__cause__ or e) in (404, 412):
            raise _gone_or(e, obj, policy) from e
        raise


def _changed(obj: RemoteObject, now: str | None) -> str:
    return changed_message(obj.url, f"ETag {obj.etag}", now, "bucket versioning")


def _gone_or(error: SourceError, obj: RemoteObject, policy: RetryPolicy) -> SourceError:
    """The error for a read of `obj` refused as absent (404) or as a failed If-Match (412):
    ObjectChangedError when the object changed, else `error`."""
    try:
        now: str | None = stat(obj.url, policy).etag
    except SourceNotFoundError:
        now = None
    if now == obj.etag and obj.version_id is None:
        return error
    if now == obj.etag:  # this version was deleted; a newer one has the same bytes
        now = f"{now} in another version"
    return ObjectChangedError(_changed(obj, now), path=obj.url)


def fetch_into(obj: RemoteObject, start: int, end: int, fd: int, policy: RetryPolicy) -> None:
    """Writes bytes [start, end) of `obj` into `fd` at the same offsets (one retried GET)."""
    from tpufeed.storage.backends import write_whole

    write_whole(fd, read_range(obj, start, end, policy), start)
