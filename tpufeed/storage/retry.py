"""Retrying calls to an object store: transient failures back off and retry, permanent ones
fail at once.

Transient: HTTP 408, 429 and 5xx, connection resets, dropped or short responses, timeouts.
Each retry waits a random time in [0, min(max_backoff, initial * 2**attempt)] ("full jitter"),
and a call gives up after `attempts` tries or once `deadline_s` has passed. Every request waits
at most `timeout_s` for the server (to connect, and between bytes), and never past what is left
of `deadline_s`: a call, retries included, ends within `deadline_s` even against a server that
accepts connections and never answers. 401/403/404 fail on the first answer, naming the path
(`gs://`, `s3://`) and the credentials to check. Messages carry the path, the HTTP status and
the exception's class; never request headers (which hold the credentials). The loop is
google.api_core's `retry_target` as it was (`_Call.run`), with tpufeed's cap on attempts,
timeouts, counters (per store: `gcs_requests`, `s3_requests`, ...) and errors.

>>> RetryPolicy.within(30).deadline_s  # what a constructor's `timeout_s=30` asks for
30.0
"""

from __future__ import annotations

import http.client
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tpufeed.errors import (
    InvalidArgumentError,
    MissingDependencyError,
    SourceError,
    SourceNotFoundError,
)
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
    """The HTTP status an exception reports (google.api_core, google.resumable_media, or
    botocore's ClientError, whose `response` is a dict)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    else:
        status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    status = status_of(exc)
    if status is not None:
        return status in _RETRY_STATUS
    if isinstance(exc, (ShortReadError, ConnectionError, TimeoutError, http.client.HTTPException)):
        return True
    return _transient_in_http_library(exc)


def _transient_in_http_library(exc: BaseException) -> bool:
    """A dropped connection or a timeout as requests, urllib3 or botocore report it (checked
    only for the libraries already loaded: a library not loaded raised nothing)."""
    import sys

    kinds: list[type] = []
    requests = sys.modules.get("requests.exceptions")
    if requests is not None:
        kinds += [requests.ConnectionError, requests.Timeout, requests.ChunkedEncodingError]
    urllib3 = sys.modules.get("urllib3.exceptions")
    if urllib3 is not None:
        kinds.append(urllib3.HTTPError)
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is not None:  # connection errors and timeouts are HTTPClientErrors
        kinds += [botocore.HTTPClientError, botocore.IncompleteReadError]
        kinds += [getattr(botocore, "ResponseStreamingError", botocore.HTTPClientError)]
    return isinstance(exc, tuple(kinds))


def describe(exc: BaseException) -> str:
    """One line about a failure: status and class, without headers or response bodies."""
    status = status_of(exc)
    kind = type(exc).__name__
    return f"HTTP {status} ({kind})" if status is not None else kind


# What a refusal (401, 403) asks to check, per store.
_WEB_CREDENTIALS = (
    "check that the URL may be read without credentials (a signed URL's signature may have expired)"
)
_CREDENTIALS = {
    "s3": "check that the AWS credentials in use (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
    "AWS_PROFILE, or the instance's role; AWS_ENDPOINT_URL for an S3-compatible store) may "
    "read this bucket",
    "http": _WEB_CREDENTIALS,
    "https": _WEB_CREDENTIALS,
    "hf": "check that HF_TOKEN (or the token `hf auth login` saved) may read the repository "
    "(a gated dataset's terms must be accepted on the Hub first)",
}
_GCS_CREDENTIALS = (
    "check that the credentials in use (Application Default Credentials: `gcloud auth "
    "application-default login`, or the VM's service account) may read this bucket"
)
# The counters' prefix of each scheme (`gcs_requests`, `s3_requests`, `http_requests`).
_STORES = {"gs": "gcs", "s3": "s3", "http": "http", "https": "http", "hf": "http"}


def _store(url: str) -> str:
    """The counters' prefix of a URL's store: "gcs" for gs://, "s3", "http" for http://,
    https:// and hf://."""
    return _STORES.get(url.partition("://")[0], "gcs")


def permanent_error(exc: BaseException, url: str, what: str) -> SourceError:
    status = status_of(exc)
    if status == 404:
        return SourceNotFoundError(f"{url}: not found (HTTP 404) while {what}", path=url)
    if status in (401, 403):
        credentials = _CREDENTIALS.get(url.partition("://")[0], _GCS_CREDENTIALS)
        return SourceError(
            f"{url}: permission denied (HTTP {status}) while {what}; {credentials}",
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
    return _Call(fn, url, what, policy, rng or random.Random()).run()


class _Call:
    """One call's retries: per-request timeouts from what is left of the deadline, the cap on
    attempts, the counters, and errors that name the path."""

    def __init__(
        self, fn: Callable[[float], T], url: str, what: str, policy: RetryPolicy, rng: random.Random
    ):
        self.fn, self.url, self.what, self.policy, self.rng = fn, url, what, policy, rng
        self.start = time.monotonic()
        self.tries = 0
        self.last: BaseException | None = None  # the failure the next attempt retries
        self.wait = 0.0
        self.store = _store(url)

    def run(self) -> Any:
        """Attempts until one answers, a failure is permanent, the attempts are spent, or the
        next wait would pass the deadline (google.api_core's `retry_target`, as it was used)."""
        waits = self.waits()
        while True:
            try:
                return self.attempt()
            except MissingDependencyError:  # the store's package, not the store: as it is
                raise
            except Exception as exc:  # noqa: BLE001 - sorted below: retried, or raised
                if not self.retryable(exc):
                    raise self.error(exc, permanent=True) from self._cause(exc)
                self.failed(exc)
                wait = next(waits)
                if time.monotonic() + wait > self.start + self.policy.deadline_s:
                    raise self.error(exc, permanent=False) from self._cause(exc)
            time.sleep(wait)

    @staticmethod
    def _cause(exc: BaseException) -> BaseException | None:
        return exc.__cause__ if isinstance(exc, SourceError) else exc

    def attempt(self) -> Any:
        if self.tries:  # a retry, counted as it is made (not a give-up at the deadline)
            self._retrying()
        self.tries += 1
        counts.count(f"{self.store}_requests")
        left = self.policy.deadline_s - (time.monotonic() - self.start)
        return self.fn(max(_MIN_REQUEST_S, min(self.policy.timeout_s, left)))

    def retryable(self, exc: Exception) -> bool:
        return not isinstance(exc, SourceError) and is_transient(exc)

    def failed(self, exc: Exception) -> None:
        """A transient failure: the last attempt's ends the call here (retry_target would
        retry until the deadline)."""
        self.last = exc
        if self.tries >= self.policy.attempts:
            raise self.gave_up(exc) from exc

    def waits(self) -> Iterator[float]:
        for attempt in itertools.count():
            self.wait = self.policy.backoff(attempt, self.rng)
            yield self.wait

    def error(self, exc: Exception, permanent: bool) -> Exception:
        """What the call raises when it ends without an answer (from `_cause(exc)`)."""
        if isinstance(exc, SourceError):  # raised by `fn` itself: as it is
            return exc
        if permanent:
            return permanent_error(exc, self.url, self.what)
        return self.gave_up(exc)  # the next wait would pass the deadline

    def gave_up(self, exc: BaseException) -> SourceError:
        policy = self.policy
        return SourceError(
            f"{self.url}: gave up {self.what} after {self.tries} attempts in "
            f"{time.monotonic() - self.start:.1f} s (one {self.store.upper()} call may take {policy.deadline_s:g} "
            f"s, retries included, and a request wait {policy.timeout_s:g} s for an answer; a "
            f"constructor's timeout_s= sets the bound); last failure: {describe(exc)}",
            path=self.url,
        )

    def _retrying(self) -> None:
        failure = describe(self.last) if self.last is not None else "?"
        counts.count(f"{self.store}_retries")
        args = {"url": self.url, "what": self.what, "failure": failure, "retry": self.tries}
        timeline.instant(f"{self.store} retry", self.store, args)
        log.info(
            "%s: %s failed (%s), retry %d after %.2f s",
            self.url,
            self.what,
            failure,
            self.tries,
            self.wait,
        )


def _short(exc: BaseException) -> str:
    text = str(exc).split("\n", 1)[0]
    return text[:200]
