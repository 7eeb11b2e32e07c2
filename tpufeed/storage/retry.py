"""Retrying GCS calls: transient failures back off and retry, permanent ones fail at once.

Transient: HTTP 408, 429 and 5xx, connection resets, dropped or short responses, timeouts.
Each retry waits a random time in [0, min(max_backoff, initial * 2**attempt)] ("full jitter"),
and a call gives up after `attempts` tries or once `deadline_s` has passed. Every request waits
at most `timeout_s` for the server (to connect, and between bytes), and never past what is left
of `deadline_s`: a call, retries included, ends within `deadline_s` even against a server that
accepts connections and never answers. 401/403/404 fail on the first answer, naming the `gs://`
path. Messages carry the path, the HTTP status and the exception's class; never request headers
(which hold the credentials).

>>> RetryPolicy.within(30).deadline_s  # what a constructor's `timeout_s=30` asks for
30.0
"""

from __future__ import annotations

import http.client
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tpufeed.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from tpufeed.observe import counts, timeline

__all__ = ["RetryPolicy", "ShortReadError", "call_with_retry"]

log = logging.getLogger("tpufeed.gcs")
T = TypeVar("T")

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# The defaults are google-cloud-storage's own: 60 s a request, 120 s a call with its retries.
REQUEST_TIMEOUT_S = 60.0
DEADLINE_S = 120.0
# A request is never given less than this, so a call near its deadline still makes one try.
_MIN_REQUEST_S = 0.05


class ShortReadError(IOError):
    """A response ended before the bytes it promised (a connection dropped mid-body)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How transient GCS failures are retried, and how long a call may take in all.

    `deadline_s` bounds each call (a listing, a metadata read, a byte range), retries included;
    `timeout_s` bounds each request's wait for the server (to connect, and between bytes).
    """

    attempts: int = 10
    deadline_s: float = DEADLINE_S
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 8.0
    timeout_s: float = REQUEST_TIMEOUT_S  # per request: connect and read

    @classmethod
    def within(cls, timeout_s: float | None) -> RetryPolicy:
        """The default policy with every call bounded by `timeout_s` seconds (None: default)."""
        if timeout_s is None:
            return cls()
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not (0 < timeout_s < float("inf"))
        ):
            raise InvalidArgumentError(
                f"timeout_s must be a positive number of seconds, got {timeout_s!r}"
            )
        return cls(deadline_s=float(timeout_s), timeout_s=min(REQUEST_TIMEOUT_S, timeout_s))

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise InvalidArgumentError(f"retry attempts must be >= 1, got {self.attempts!r}")
        for name in ("deadline_s", "initial_backoff_s", "max_backoff_s", "timeout_s"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(f"retry {name} must be > 0, got {getattr(self, name)!r}")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_backoff_s, self.initial_backoff_s * 2.0**attempt))


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception reports (google.api_core or google.resumable_media)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    status = status_of(exc)
    if status is not None:
        return status in _RETRY_STATUS
    if isinstance(exc, (ShortReadError, ConnectionError, TimeoutError, http.client.HTTPException)):
        return True
    try:
        import requests
        import urllib3
    except ImportError:  # pragma: no cover - both come with google-cloud-storage
        return False
    return isinstance(
        exc,
        (
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
            urllib3.exceptions.HTTPError,
        ),
    )


def describe(exc: BaseException) -> str:
    """One line about a failure: status and class, without headers or response bodies."""
    status = status_of(exc)
    kind = type(exc).__name__
    return f"HTTP {status} ({kind})" if status is not None else kind


def permanent_error(exc: BaseException, url: str, what: str) -> SourceError:
    status = status_of(exc)
    if status == 404:
        return SourceNotFoundError(f"{url}: not found (HTTP 404) while {what}", path=url)
    if status in (401, 403):
        return SourceError(
            f"{url}: permission denied (HTTP {status}) while {what}; check that the credentials "
            "in use (Application Default Credentials: `gcloud auth application-default login`, "
            "or the VM's service account) may read this bucket",
            path=url,
        )
    return SourceError(f"{url}: {describe(exc)} while {what}: {_short(exc)}", path=url)


def call_with_retry(
    fn: Callable[[float], T],
    url: str,
    what: str,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> T:
    """Runs `fn(request_timeout_s)`, retrying transient failures under `policy`, each attempt
    given what is left of the deadline at most; raises a SourceError naming `url`."""
    rng = rng or random.Random()
    start = time.monotonic()
    attempt = 0
    while True:
        left = policy.deadline_s - (time.monotonic() - start)
        counts.count("gcs_requests")
        try:
            return fn(max(_MIN_REQUEST_S, min(policy.timeout_s, left)))
        except Exception as exc:
            if isinstance(exc, SourceError):
                raise
            if not is_transient(exc):
                raise permanent_error(exc, url, what) from exc
            elapsed = time.monotonic() - start
            wait = policy.backoff(attempt, rng)
            if attempt + 1 >= policy.attempts or elapsed + wait > policy.deadline_s:
                raise SourceError(
                    f"{url}: gave up {what} after {attempt + 1} attempts in {elapsed:.1f} s "
                    f"(a GCS call may take {policy.deadline_s:g} s, retries included, and a "
                    f"request wait {policy.timeout_s:g} s for an answer; a constructor's "
                    f"timeout_s= sets the bound); last failure: {describe(exc)}",
                    path=url,
                ) from exc
            counts.count("gcs_retries")
            timeline.instant(
                "gcs retry",
                "gcs",
                {"url": url, "what": what, "failure": describe(exc), "retry": attempt + 1},
            )
            log.info(
                "%s: %s failed (%s), retry %d in %.2f s",
                url,
                what,
                describe(exc),
                attempt + 1,
                wait,
            )
            time.sleep(wait)
            attempt += 1


def _short(exc: BaseException) -> str:
    text = str(exc).split("\n", 1)[0]
    return text[:200]
