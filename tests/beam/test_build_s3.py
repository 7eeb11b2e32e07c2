"""Builds that read and write s3:// paths, through the shared S3 server (moto) on 127.0.0.1:
Beam's S3 file system, given the build's options, with boto3's environment as tpufeed's."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("boto3")


import tpufeed
from tpufeed.beam import BuildConfig, build

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def test_build_from_and_to_s3(s3, s3_bucket, s3_upload, s3_server, monkeypatch):
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    lines = "".join(json.dumps({"id": i, "v": [i, i]}) + "\n" for i in range(12))
    s3_upload(s3_bucket, "raw/part-0.jsonl", lines.encode())
    s3_upload(s3_bucket, "raw/part-1.jsonl", b'{"id": 12, "v": [12, 12]}\n')
    summary = build(
        BuildConfig(
            inputs=(f"s3://{s3_bucket}/raw/*.jsonl",), output=f"s3://{s3_bucket}/ds", num_shards=3
        )
    )
    assert summary["records_out"] == 13 and summary["shards"] == 3
    listed = s3_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="ds/")["Contents"]
    assert sorted(o["Key"] for o in listed) == [
        "ds/data-00000-of-00003.array_record",
        "ds/data-00001-of-00003.array_record",
        "ds/data-00002-of-00003.array_record",
        "ds/manifest.json",
    ]  # temporaries gone
    remote = tpufeed.Dataset.open(f"s3://{s3_bucket}/ds", verify=True).source  # read in place
    assert [r["id"] for r in remote.__getitems__(range(13))] == list(range(13))
