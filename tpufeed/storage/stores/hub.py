"""hf://datasets/ORG/NAME/PATH: the files of a Hugging Face Hub dataset repository, read in place.

A path names a file of the repository, or a glob of them (`*` and `?` stay within a folder,
`**` does not), optionally at a revision after `@`: a branch, a tag or a commit, URL-encoded
as the Hub's own paths write it (`hf://datasets/ORG/NAME@refs%2Fconvert%2Fparquet/default/
train/*.parquet`, the Parquet files the Hub converts a dataset into). Opening a path resolves
the revision to its commit once and lists the files through the Hub's tree API. Every read is
a ranged GET of the file's resolve URL at that commit, which the Hub never changes: a branch
that moves on while a job runs changes nothing it reads. A file's version is its content hash
from the listing (the LFS SHA-256, else the git blob id), and every answer's `X-Linked-Etag`
(else `ETag`) must name it; a commit the Hub no longer has (a force-push) raises
`ObjectChangedError`.

`HF_ENDPOINT` names another Hub (a mirror; default https://huggingface.co). `HF_TOKEN` (else
the token `hf auth login` saved: `HF_TOKEN_PATH`, else `$HF_HOME/token`) goes with every request
to that endpoint, and never to the host a download is redirected to (the CDN).

>>> [o.url for o in list_objects("hf://datasets/org/name/data/*.parquet", RetryPolicy())]  # doctest: +SKIP
['hf://datasets/org/name/data/train-0.parquet', 'hf://datasets/org/name/data/train-1.parquet']
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote, unquote

from tpufeed.errors import (
    InvalidArgumentError,
    ObjectChangedError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.observe import counts
from tpufeed.storage.bounded import malformed, parsing
from tpufeed.storage.objects import GLOB_CHARS, RemoteObject, glob_split
from tpufeed.storage.retry import RetryPolicy, ShortReadError, call_with_retry, status_of
from tpufeed.storage.stores.http_client import Answer, request
from tpufeed.storage.stores.web import IDENTITY, ranged_get, total_size

__all__ = ["HubPath", "endpoint", "fetch_into", "list_objects", "list_prefix", "read_range", "stat"]

DEFAULT_ENDPOINT = "https://huggingface.co"
_LISTING_BYTES = 64 << 20  # one page of a listing (the Hub sends 1,000 entries)
_COMMIT = re.compile(r"[0-9a-f]{40}")
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class HubPath:
    """An hf:// path: the repository ("ORG/NAME"), the revision as written (None: main) and
    the path inside the repository (a file, a glob, or "" for its root)."""

    repo: str
    revision: str | None
    path: str

    @classmethod
    def parse(cls, url: str) -> HubPath:
        rest = url.removeprefix("hf://")
        parts = rest.split("/", 3)
        if len(parts) < 3 or parts[0] != "datasets" or not parts[1] or not parts[2]:
            raise InvalidArgumentError(
                f"{url!r} is not a Hub dataset path: hf://datasets/ORG/NAME/PATH (a file or a "
                "glob; @REVISION after NAME for a branch, tag or commit)"
            )
        name, at, revision = parts[2].partition("@")
        if GLOB_CHARS.intersection(parts[1] + name) or (at and not revision):
            raise InvalidArgumentError(f"{url!r} does not name one repository (ORG/NAME[@REV])")
        return cls(f"{parts[1]}/{name}", unquote(revision) if at else None, _path(parts))

    @property
    def bucket(self) -> str:
        """What an object's URL holds before its path: datasets/ORG/NAME[@REVISION]."""
        at = f"@{quote(self.revision, safe='')}" if self.revision is not None else ""
        return f"datasets/{self.repo}{at}"

    @property
    def url(self) -> str:
        return f"hf://{self.bucket}/{self.path}"


def _path(parts: list[str]) -> str:
    return parts[3] if len(parts) > 3 else ""


def endpoint() -> str:
    """The Hub the environment names now (HF_ENDPOINT), without a trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _token() -> str | None:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token.strip()
    home = os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            return f.read(4096).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _headers() -> dict[str, str]:
    token = _token()
    return {"Authorization": f"Bearer {token}"} if token else {}


# -- the repository: its commit, its listing ---------------------------------------------------


def commit_of(where: HubPath, policy: RetryPolicy) -> str:
    """The commit `where`'s revision names now (a commit names itself)."""
    revision = where.revision or "main"
    if _COMMIT.fullmatch(revision):
        return revision
    url = f"{endpoint()}/api/datasets/{where.repo}/revision/{quote(revision, safe='')}"
    answer = call_with_retry(
        partial(_listing, url),
        where.url,
        f"reading which commit revision {revision!r} is",
        policy,
    )
    with parsing(where.url, "the Hub's answer naming a revision's commit"):
        sha = json.loads(answer.body)["sha"]
    if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
        raise malformed(where.url, "the Hub's answer naming a revision's commit", f"sha {sha!r}")
    return sha


def _listing(url: str, timeout: float) -> Answer:
    return request(
        "GET", url, {**_headers(), "Accept": "application/json"}, timeout, (200,), _LISTING_BYTES
    )


def _tree(where: HubPath, sha: str, folder: str, recursive: bool, policy: RetryPolicy) -> list:
    """Every entry of the tree API's listing of `folder` at commit `sha`, page after page."""
    tail = f"/{quote(folder, safe='')}" if folder else ""
    url: str | None = (
        f"{endpoint()}/api/datasets/{where.repo}/tree/{sha}{tail}"
        f"?recursive={str(recursive).lower()}&expand=false"
    )
    entries: list[Any] = []
    while url is not None:
        answer = call_with_retry(partial(_listing, url), where.url, "listing files", policy)
        with parsing(where.url, "the Hub's file listing"):
            page = json.loads(answer.body)
            entries.extend(page if isinstance(page, list) else page["entries"])
        url = _next_page(answer)
    return entries


def _next_page(answer: Answer) -> str | None:
    from urllib.parse import urljoin

    found = _NEXT.search(answer.headers.get("Link") or "")
    return urljoin(answer.url, found[1]) if found else None


def _object(where: HubPath, sha: str, entry: Any) -> RemoteObject:
    """A file of the listing as an object: its size, and its content hash as its version."""
    with parsing(where.url, "an entry of the Hub's file listing"):
        path, size, lfs = entry["path"], entry["size"], entry.get("lfs")
        digest = lfs["oid"] if isinstance(lfs, dict) else entry["oid"]
        size = lfs["size"] if isinstance(lfs, dict) else size
        if not (isinstance(path, str) and isinstance(digest, str) and isinstance(size, int)):
            raise ValueError(f"path {path!r}, size {size!r}, oid {digest!r}")
        if size < 0 or not path or path.startswith("/") or "\0" in path:
            raise ValueError(f"path {path!r}, size {size!r}")
    return RemoteObject(where.bucket, path, size, 0, None, "hf", f'"{digest}"', None, sha)


def _files(entries: list) -> list:
    return [e for e in entries if isinstance(e, dict) and e.get("type") == "file"]


# -- the five functions of a store -------------------------------------------------------------


def list_objects(pattern: str, policy: RetryPolicy) -> list[RemoteObject]:
    """The files an hf:// path names: one file, or a glob's matches sorted by name."""
    where = HubPath.parse(pattern)
    if not where.path or where.path.endswith("/"):
        raise InvalidArgumentError(
            f"{pattern} is a folder; pass files or a glob such as '{pattern.rstrip('/')}/*'"
        )
    sha = commit_of(where, policy)
    if not GLOB_CHARS.intersection(where.path):
        return [_one(where, sha, policy)]
    prefix, matcher, recursive = glob_split(where.path)
    try:
        entries = _tree(where, sha, prefix.rpartition("/")[0], recursive, policy)
    except SourceNotFoundError:
        entries = []  # the folder the glob starts in is not there
    found = sorted(
        (_object(where, sha, e) for e in _files(entries) if matcher.fullmatch(str(e.get("path")))),
        key=lambda o: o.name,
    )
    if not found:
        raise SourceNotFoundError(f"no file matches the glob {pattern!r}", path=pattern)
    return found


def _one(where: HubPath, sha: str, policy: RetryPolicy) -> RemoteObject:
    folder = where.path.rpartition("/")[0]
    try:
        entries = _tree(where, sha, folder, False, policy)
    except SourceNotFoundError:
        entries = []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("path") == where.path:
            if entry.get("type") != "file":
                raise InvalidArgumentError(
                    f"{where.url} is a folder; pass files or a glob such as '{where.url}/*'"
                )
            return _object(where, sha, entry)
    raise SourceNotFoundError(f"{where.url}: no such file at commit {sha}", path=where.url)


def list_prefix(url: str, policy: RetryPolicy) -> list[RemoteObject]:
    """Every file whose path starts with the path of `url`, sorted by name."""
    where = HubPath.parse(url)
    sha = commit_of(where, policy)
    entries = _tree(where, sha, where.path.rpartition("/")[0], True, policy)
    found = [_object(where, sha, e) for e in _files(entries)]
    return sorted((o for o in found if o.name.startswith(where.path)), key=lambda o: o.name)


def stat(url: str, policy: RetryPolicy) -> RemoteObject:
    """The file at an hf:// path, at the commit its revision names now."""
    where = HubPath.parse(url)
    if not where.path or where.path.endswith("/"):
        raise InvalidArgumentError(f"{url} is a folder; pass files or a glob such as '{url}*'")
    return _one(where, commit_of(where, policy), policy)


def resolve_url(obj: RemoteObject) -> str:
    """Where the Hub serves `obj`'s bytes: its resolve URL at the commit it was listed at."""
    repo = obj.bucket.removeprefix("datasets/").partition("@")[0]
    return f"{endpoint()}/datasets/{repo}/resolve/{obj.revision}/{quote(obj.name)}"


def read_range(obj: RemoteObject, start: int, end: int, policy: RetryPolicy) -> bytes:
    """Bytes [start, end) of `obj` at its commit, retried until whole."""
    if not 0 <= start < end <= obj.size:
        raise InvalidArgumentError(
            f"{obj.url}: byte range [{start}, {end}) is outside its {obj.size} bytes"
        )
    url, headers = resolve_url(obj), {**_headers(), **IDENTITY}

    def get(timeout: float) -> bytes:
        answer = ranged_get(url, start, end, headers, timeout)
        counts.count("http_bytes", len(answer.body))
        hub = (answer.hops or (answer.headers,))[0]  # the Hub's own answer, not its CDN's
        served = hub.get("X-Linked-Etag") or hub.get("ETag")
        size = total_size(answer, obj.url)
        if (served and _bare(served) != _bare(obj.etag)) or size != obj.size:
            raise ObjectChangedError(_changed(obj, f"{served}, {size:,} bytes"), path=obj.url)
        if len(answer.body) != end - start:
            raise ShortReadError(f"got {len(answer.body)} of {end - start} bytes")
        return answer.body

    try:
        return call_with_retry(get, obj.url, f"reading bytes [{start}, {end})", policy)
    except SourceError as e:
        if status_of(e.__cause__ or e) in (404, 410):
            raise ObjectChangedError(
                f"{obj.url} was listed at commit {obj.revision}, which the Hub no longer serves "
                "(HTTP 404: history rewritten, or the repository moved or deleted). Open the "
                "dataset again to read what its revision holds now",
                path=obj.url,
            ) from e
        raise


def _bare(etag: str | None) -> str:
    return (etag or "").removeprefix("W/").strip('"')


def _changed(obj: RemoteObject, now: str) -> str:
    return (
        f"{obj.url} at commit {obj.revision} was served as another file (ETag {now}) than the "
        f"Hub listed (ETag {obj.etag}, {obj.size:,} bytes): the endpoint {endpoint()} does not "
        "serve that commit as it was. Open the dataset again, and check HF_ENDPOINT"
    )


def fetch_into(obj: RemoteObject, start: int, end: int, fd: int, policy: RetryPolicy) -> None:
    """Writes bytes [start, end) of `obj` into `fd` at the same offsets (one retried GET)."""
    from tpufeed.storage.backends import write_whole

    write_whole(fd, read_range(obj, start, end, policy), start)
