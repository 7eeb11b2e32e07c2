"""The S3 endpoint that this process's environment names: boto3 reads `AWS_ENDPOINT_URL_S3`
(first) and `AWS_ENDPOINT_URL` itself; tpufeed keeps one client per endpoint they name, so that
a change of endpoint within a process (tests, a second store) gets a client of its own."""

from __future__ import annotations

import os

__all__ = ["endpoint_settings"]


def endpoint_settings() -> tuple[str | None, str | None]:
    """(AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL) as set now (None where unset)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3"), os.environ.get("AWS_ENDPOINT_URL")
