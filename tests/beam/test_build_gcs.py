"""Builds that read and write gs:// paths, through the shared GCS emulator on 127.0.0.1."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("google.cloud.storage")


import tpufeed
from tpufeed.beam import BuildConfig, build

pytestmark = pytest.mark.emulator


def _download_dataset(remote: str, local) -> list[str]:
    from apache_beam.io.filesystems import FileSystems

    os.makedirs(local)
    names = []
    for meta in FileSystems.match([f"{remote}/**"])[0].metadata_list:
        name = meta.path[len(remote) + 1 :]
        names.append(name)
        if "/" not in name:
            with FileSystems.open(meta.path) as src, open(local / name, "wb") as dst:
                dst.write(src.read())
    return sorted(names)


def test_build_from_and_to_gcs(gcs, bucket, upload, tmp_path):
    lines = "".join(json.dumps({"id": i, "v": [i, i]}) + "\n" for i in range(12))
    upload(bucket, "raw/part-0.jsonl", lines.encode())
    upload(bucket, "raw/part-1.jsonl", b'{"id": 12, "v": [12, 12]}\n')
    summary = build(
        BuildConfig(
            inputs=(f"gs://{bucket}/raw/*.jsonl",), output=f"gs://{bucket}/ds", num_shards=3
        )
    )
    assert summary["records_out"] == 13 and summary["shards"] == 3
    names = _download_dataset(f"gs://{bucket}/ds", tmp_path / "copy")
    assert names == [
        "data-00000-of-00003.array_record",
        "data-00001-of-00003.array_record",
        "data-00002-of-00003.array_record",
        "manifest.json",
    ]  # temporaries gone
    source = tpufeed.Dataset.open(tmp_path / "copy", verify=True).source
    assert [r["id"] for r in source.__getitems__(range(13))] == list(range(13))
    remote = tpufeed.Dataset.open(f"gs://{bucket}/ds", verify=True).source  # read in place
    assert remote.fingerprint() == source.fingerprint()
    assert [r["id"] for r in remote.__getitems__(range(13))] == list(range(13))
