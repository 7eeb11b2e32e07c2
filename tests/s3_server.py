"""A real S3-compatible server on 127.0.0.1 for tests (moto's server mode), behind the same
fault-injecting proxy as the GCS emulator (`tests.gcs_emulator.FaultProxy`).

`S3Server` runs `moto.server.ThreadedMotoServer` on a free port, in memory. `S3FaultProxy` is
the GCS tests' proxy with S3's downloads counted as media (a GET of `/bucket/key`, not a
listing), so a test can count the object bytes a run fetched. tpufeed talks HTTP to the proxy
through boto3 (`AWS_ENDPOINT_URL_S3` points at it). Moto checks `If-Match` on downloads (412 for
an ETag that is no longer the object's) as S3 does, so a replaced object needs no help here.

The fixtures built on them (`s3_server`, `s3`, `s3_bucket`, `s3_upload`) are in
tests/conftest.py.
"""

from __future__ import annotations

import http.server
from urllib.parse import urlsplit

from tests.gcs_emulator import FaultProxy, upload_shards

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    """moto's S3 in a thread of this process; `stop()` ends it."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self):
        """A client straight to the server (no proxy, no faults): for setting up data."""
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def stop(self) -> None:
        self._server.stop()


class S3FaultProxy(FaultProxy):
    """`FaultProxy` that counts S3 object downloads as media."""

    def _is_media(self, handler: http.server.BaseHTTPRequestHandler) -> bool:
        url = urlsplit(handler.path)
        return handler.command == "GET" and url.path.strip("/").count("/") >= 1 and not url.query


def upload_s3_shards(
    upload, bucket: str, folder: str, shards: int, records: int, file_format: str = "array_record"
) -> tuple[str, list[bytes]]:
    """`upload_shards` of the GCS tests, to the S3 server: (s3:// glob URL, records)."""
    return upload_shards(upload, bucket, folder, shards, records, file_format, scheme="s3")
