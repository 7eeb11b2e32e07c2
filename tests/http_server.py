"""A real HTTP server on 127.0.0.1 for tests: files with byte ranges and ETags, and the Hugging
Face Hub's layout, behind the fault proxy of the GCS tests (`tests.gcs_emulator.FaultProxy`).

`WebServer` is a threaded HTTP/1.1 server (keep-alive, optionally TLS) that serves:

- `/files/PATH`: the files under its `root` folder, as a static server does: single byte
  ranges (206, `Content-Range`; 416 past the end), an `ETag` of the file's inode, modification
  time and size (Apache's recipe, so a file replaced by another of the same size and time is
  another version), `Last-Modified`, `If-Match` and `If-Unmodified-Since` (412). `etags`,
  `last_modified` and `ranges` turn each off, to play a server without them.
- the Hub (`Hub`, in memory): `/api/datasets/ORG/NAME[/revision/REV]`, the tree API
  `/api/datasets/ORG/NAME/tree/REV[/PATH]?recursive=` (paged by a `Link: <...>; rel="next"`
  header, `page_size` entries a page), `/datasets/ORG/NAME/resolve/REV/PATH` (LFS files: a 302
  to `/cdn/SHA256?X-Amz-Signature=...` with `X-Linked-Etag`, `X-Linked-Size` and
  `X-Repo-Commit`, as the Hub redirects to its CDN; others answered in place with the git blob
  id as ETag). Commits keep their files: a branch moved on leaves old commits readable until
  `forget(sha)` (a force-push). A private repository answers 401 without its token; the CDN
  answers 400 to a request that carries an `Authorization` header (as S3 does to a signed URL
  sent with credentials), and counts it in `leaked_credentials`.

`WebFaultProxy` is the GCS tests' proxy with these downloads counted as media. The fixtures
(`web_server`, `web`, `web_bucket`, `web_upload`, `hub`) are in tests/conftest.py.
`python tests/http_server.py ROOT` serves ROOT on its own (for benchmarks/https.py).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import signal
import ssl
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.gcs_emulator import FaultProxy

TEXT_SUFFIXES = (".md", ".json", ".txt", ".yaml", ".gitattributes", ".py")


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    private: bool = False
    token: str | None = None
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)


class Hub:
    """Dataset repositories in memory, laid out and answered as the Hub does."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # sha256 -> bytes, what the CDN serves
        self.page_size = 1000
        self.cdn_base = ""  # "" : the CDN is this server (a relative redirect)
        self.leaked_credentials = 0
        self._lock = threading.Lock()

    def create(self, repo: str, private: bool = False, token: str | None = None) -> None:
        with self._lock:
            self.repos[repo] = Repo(private, token)

    def commit(self, repo: str, files: dict[str, bytes | None], branch: str = "main") -> str:
        """A new commit on `branch`: the branch's files, with `files` put (None: deleted)."""
        with self._lock:
            r = self.repos[repo]
            parent = r.refs.get(branch)
            tree = dict(r.commits[parent]) if parent else {}
            for path, data in files.items():
                if data is None:
                    tree.pop(path, None)
                else:
                    tree[path] = data
                    self.blobs[hashlib.sha256(data).hexdigest()] = data
            listed = json.dumps([parent, {p: git_oid(d) for p, d in sorted(tree.items())}])
            sha = hashlib.sha1(listed.encode()).hexdigest()
            r.commits[sha] = tree
            r.refs[branch] = sha
            return sha

    def forget(self, repo: str, sha: str) -> None:
        """History rewritten: commit `sha` is served no more."""
        with self._lock:
            self.repos[repo].commits.pop(sha, None)

    def tree_at(self, repo: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
        r = self.repos.get(repo)
        if r is None:
            return None
        sha = r.refs.get(revision, revision)
        tree = r.commits.get(sha)
        return None if tree is None else (sha, tree)

    @staticmethod
    def lfs(path: str) -> bool:
        return not path.endswith(TEXT_SUFFIXES)

    def entry(self, path: str, data: bytes) -> dict:
        entry = {"type": "file", "oid": git_oid(data), "size": len(data), "path": path}
        if self.lfs(path):
            sha256 = hashlib.sha256(data).hexdigest()
            entry["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": 134}
        return entry

    def listing(self, tree: dict[str, bytes], folder: str, recursive: bool) -> list[dict] | None:
        """Entries under `folder` (None: not a folder), folders first as the Hub lists them."""
        base = f"{folder}/" if folder else ""
        under = {p: d for p, d in tree.items() if p.startswith(base)}
        if folder and not under:
            return None
        files, folders = [], set()
        for path, data in sorted(under.items()):
            rest = path[len(base) :]
            parts = rest.split("/")
            for depth in range(1, len(parts)):
                if depth == 1 or recursive:
                    folders.add(base + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                files.append(self.entry(path, data))
        dirs = [
            {"type": "directory", "oid": "0" * 40, "size": 0, "path": p} for p in sorted(folders)
        ]
        return dirs + files


class WebServer:
    """The server: `root` served under /files/, `hub` under the Hub's paths. `stop()` ends it."""

    def __init__(self, root: Path, tls: tuple[str, str] | None = None):
        self.root = Path(root)
        self.hub = Hub()
        self.etags = True
        self.last_modified = True
        self.ranges = True
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.before_file: Callable[[Path], None] | None = None  # called as each file is served
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes: with Nagle's algorithm the body would wait
            # for the client's delayed ACK of the headers (~40 ms a request), as no real server
            # makes it wait.
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                server._handle(self)

            do_HEAD = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.scheme = "https" if tls else "http"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self.etags = self.last_modified = self.ranges = True
            self.requests = []
            self.before_file = None
            self.hub.page_size = 1000
            self.hub.cdn_base = ""
            self.hub.leaked_credentials = 0

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- requests -------------------------------------------------------------------------------

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append((h.command, h.path, {k.lower(): v for k, v in h.headers.items()}))
        url = urlsplit(h.path)
        path = url.path  # still encoded: a revision may hold an encoded "/"
        if path.startswith("/files/"):
            self._file(h, self.root / unquote(path[len("/files/") :]))
        elif path.startswith("/cdn/"):
            self._cdn(h, path[len("/cdn/") :])
        elif path.startswith("/api/datasets/"):
            self._api(h, path[len("/api/datasets/") :], parse_qs(url.query))
        elif path.startswith("/datasets/") and "/resolve/" in path:
            self._resolve(h, path[len("/datasets/") :])
        else:
            _json(h, 404, {"error": f"no route for {path}"})

    def _file(self, h, path: Path) -> None:
        if self.before_file is not None:
            self.before_file(path)
        if ".." in path.parts or not path.is_file():
            _json(h, 404, {"error": "Not Found"})
            return
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            etag = f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"' if self.etags else None
            modified = formatdate(st.st_mtime, usegmt=True) if self.last_modified else None
            if _refused(h, etag, st.st_mtime):
                _json(h, 412, {"error": "Precondition Failed"})
                return
            headers = {"ETag": etag, "Last-Modified": modified}
            _ranged(h, st.st_size, lambda s, n: os.pread(f.fileno(), n, s), headers, self.ranges)

    def _cdn(self, h, sha256: str) -> None:
        if "authorization" in {k.lower() for k in h.headers}:
            with self._lock:
                self.hub.leaked_credentials += 1
            _json(h, 400, {"error": "Only one auth mechanism allowed"})
            return
        data = self.hub.blobs.get(sha256)
        if data is None:
            _json(h, 404, {"error": "NoSuchKey"})
            return
        etag = f'"cdn-{hashlib.md5(data).hexdigest()}"'
        _ranged(h, len(data), lambda s, n: data[s : s + n], {"ETag": etag}, True)

    def _denied(self, h, repo: str) -> bool:
        r = self.hub.repos.get(repo)
        if r is None:
            _json(h, 404, {"error": "Repository not found"})
            return True
        if r.private and h.headers.get("Authorization") != f"Bearer {r.token}":
            _json(h, 401, {"error": "Invalid credentials in Authorization header"})
            return True
        return False

    def _api(self, h, rest: str, query: dict) -> None:
        if re.fullmatch(r"[^/]+/[^/]+/?", rest):  # the repository's info: its main branch's
            rest = f"{rest.rstrip('/')}/revision/main"
        m = re.fullmatch(r"([^/]+/[^/]+)/(revision|tree)/([^/]+)(?:/(.*))?", rest)
        if m is None:
            _json(h, 404, {"error": "unknown API route"})
            return
        repo, kind, revision, folder = m[1], m[2], unquote(m[3]), unquote(m[4] or "")
        if self._denied(h, repo):
            return
        found = self.hub.tree_at(repo, revision)
        if found is None:
            _json(h, 404, {"error": f"Invalid rev id: {revision}"})
            return
        sha, tree = found
        if kind == "revision":
            siblings = [{"rfilename": p} for p in sorted(tree)]
            _json(h, 200, {"id": repo, "sha": sha, "siblings": siblings})
            return
        recursive = query.get("recursive", ["false"])[0] == "true"
        entries = self.hub.listing(tree, folder.strip("/"), recursive)
        if entries is None:
            _json(h, 404, {"error": f"{folder} does not exist on {revision}"})
            return
        start = int(query.get("cursor", ["0"])[0])
        page, size = entries[start : start + self.hub.page_size], self.hub.page_size
        headers = {}
        if start + size < len(entries):
            tail = f"/{quote(folder, safe='')}" if folder else ""
            link = f"/api/datasets/{repo}/tree/{quote(revision, safe='')}{tail}?recursive={str(recursive).lower()}&expand=false&cursor={start + size}"
            headers["Link"] = f'<{link}>; rel="next"'
        _json(h, 200, page, headers)

    def _resolve(self, h, rest: str) -> None:
        m = re.fullmatch(r"([^/]+/[^/]+)/resolve/([^/]+)/(.+)", rest)
        if m is None or self._denied(h, m[1]):
            if m is None:
                _json(h, 404, {"error": "Entry not found"})
            return
        found = self.hub.tree_at(m[1], unquote(m[2]))
        data = None if found is None else found[1].get(unquote(m[3]))
        if found is None or data is None:
            _json(h, 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            return
        sha = found[0]
        if not self.hub.lfs(unquote(m[3])):
            headers = {"ETag": f'"{git_oid(data)}"', "X-Repo-Commit": sha}
            _ranged(h, len(data), lambda s, n: data[s : s + n], headers, True)
            return
        sha256 = hashlib.sha256(data).hexdigest()
        h.send_response(302)
        h.send_header("Location", f"{self.hub.cdn_base}/cdn/{sha256}?X-Amz-Signature=s3cr3t")
        h.send_header("X-Linked-Etag", f'"{sha256}"')
        h.send_header("ETag", f'"{sha256}"')
        h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("X-Repo-Commit", sha)
        h.send_header("Content-Length", "0")
        h.end_headers()


def _refused(h, etag: str | None, mtime: float) -> bool:
    """Whether `If-Match` or `If-Unmodified-Since` refuse this version."""
    wanted = h.headers.get("If-Match")
    if wanted is not None and wanted.strip() != "*":
        if etag is None or etag not in [t.strip() for t in wanted.split(",")]:
            return True
    since = h.headers.get("If-Unmodified-Since")
    if since is not None and wanted is None:
        try:
            return int(mtime) > parsedate_to_datetime(since).timestamp()
        except (TypeError, ValueError):
            return False
    return False


def _ranged(h, size: int, read, headers: dict, ranges: bool) -> None:
    """Answers with the whole body, or the one range asked for (206, or 416 past the end)."""
    status, start, end = 200, 0, size
    asked = h.headers.get("Range") if ranges else None
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", asked or "")
    if m and (m[1] or m[2]):
        if m[1]:
            start, end = int(m[1]), min(size, int(m[2]) + 1) if m[2] else size
        else:
            start, end = max(0, size - int(m[2])), size
        if start >= size:
            h.send_response(416)
            h.send_header("Content-Range", f"bytes */{size}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        status = 206
    h.send_response(status)
    for name, value in headers.items():
        if value is not None:
            h.send_header(name, value)
    h.send_header("Accept-Ranges", "bytes" if ranges else "none")
    if status == 206:
        h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
    h.send_header("Content-Length", str(end - start))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(read(start, end - start))


def _json(h, status: int, body, headers: dict | None = None) -> None:
    payload = json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.send_header("Content-Length", str(len(payload)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(payload)


class WebFaultProxy(FaultProxy):
    """`FaultProxy` that counts file, resolve and CDN downloads as media."""

    def _is_media(self, handler: http.server.BaseHTTPRequestHandler) -> bool:
        path = urlsplit(handler.path).path
        return handler.command == "GET" and (
            path.startswith(("/files/", "/cdn/")) or "/resolve/" in path
        )


def self_signed(folder: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, made by openssl: (cert file, key file)."""
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key


if __name__ == "__main__":
    # `python tests/http_server.py ROOT`: serves ROOT under /files/ in its own process (for
    # benchmarks); prints its port, serves until killed or orphaned.
    import ctypes
    import sys

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    print(WebServer(Path(sys.argv[1])).port, flush=True)
    threading.Event().wait()
