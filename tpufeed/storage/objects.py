"""One version of one object in a bucket, whatever the store: what the cache and reads key by.

Every backend (`storage.backends`) lists and stats objects as `RemoteObject`s; the shard cache,
the transfers and the sources see nothing else. A URL is `SCHEME://BUCKET/NAME`; its glob
syntax is the same on every store (`glob_regex`): `*` and `?` do not cross `/`, `**` does.

>>> RemoteObject("bucket", "train/part-0.tfrecord", 10, 1, None).url
'gs://bucket/train/part-0.tfrecord'
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass

from tpufeed.errors import InvalidArgumentError

__all__ = [
    "GLOB_CHARS",
    "RemoteObject",
    "changed_message",
    "glob_regex",
    "glob_split",
    "split_url",
]

GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class RemoteObject:
    """One version of one object: its bytes never change under this value.

    `generation` is GCS's generation, or an S3 or web object's last-modified time in
    microseconds (0 where there is none); `etag` and `version_id` are S3's, or a web server's
    ETag (every read of the object names it, If-Match); `revision` is the commit a Hugging Face
    Hub file is read at (`storage.stores.hub`).
    """

    bucket: str
    name: str
    size: int
    generation: int
    crc32c: int | None  # None when the store keeps none for the object
    scheme: str = "gs"
    etag: str | None = None
    version_id: str | None = None
    revision: str | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.name}"

    @property
    def version(self) -> str:
        """What changes whenever the object's bytes do: the generation, or ETag and VersionId."""
        if self.etag is None:
            return str(self.generation)
        return self.etag if self.version_id is None else f"{self.etag}@{self.version_id}"

    @property
    def content_version(self) -> int:
        """A number that changes whenever the bytes do, for a state's record of its files: the
        CRC32C where the store keeps one; else the generation (GCS's; an S3 or web object's
        last-modified time); else a digest of the ETag (a Hub file, named by its content)."""
        if self.crc32c is not None:
            return self.crc32c
        if self.generation or self.etag is None:
            return self.generation
        return int.from_bytes(hashlib.blake2b(self.etag.encode(), digest_size=6).digest(), "big")

    @property
    def identity(self) -> str:
        """Object and version in one string (what a cache entry's key is derived from)."""
        if self.scheme == "gs":  # as the cache has always keyed gs:// copies
            return f"{self.bucket}/{self.name}#{self.generation}"
        return f"{self.url}#{self.version}"


def split_url(url: str, scheme: str) -> tuple[str, str]:
    """(bucket, object name) of a `scheme://` URL; the name may be empty (a bucket) or a glob."""
    prefix = f"{scheme}://"
    if not isinstance(url, str) or not url.startswith(prefix):
        raise InvalidArgumentError(f"not a {prefix} URL: {url!r}")
    bucket, _, name = url[len(prefix) :].partition("/")
    if not bucket or GLOB_CHARS.intersection(bucket):
        raise InvalidArgumentError(f"{url!r} does not name a bucket ({prefix}BUCKET/OBJECT)")
    return bucket, name


def glob_split(name: str) -> tuple[str, re.Pattern[str], bool]:
    """(listing prefix, matcher of whole names, whether the listing must recurse) of a glob."""
    prefix = re.split(r"[*?\[]", name, maxsplit=1)[0]
    recursive = "/" in name[len(prefix) :] or "**" in name
    return prefix, re.compile(glob_regex(name)), recursive


def glob_regex(pattern: str) -> str:
    """A regex of the names `pattern` matches: `*` and `?` stay within a folder, `**` does not."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                # fnmatch's translation of one bracket expression, kept from crossing "/".
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def changed_message(url: str, version: str, now: object, versioning: str) -> str:
    """What `ObjectChangedError` says of `url`, read as `version` ("generation 5", "ETag
    \"ab\""), now at version `now` (None: deleted); `versioning` names the store's way to keep
    old versions."""
    what = f"changed while it was read ({version}, now {now})"
    if now is None:
        what = f"was deleted while it was read ({version})"
    return (
        f"{url} {what}: its bytes are no longer the ones this source listed. Open the "
        "dataset again to read the new object; a running job needs objects that stay as they "
        f"are (write new names, or keep old versions with {versioning})"
    )
