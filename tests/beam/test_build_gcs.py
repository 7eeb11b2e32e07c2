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


def test_a_gcs_rebuild_switches_by_its_manifest_and_deletes_the_old_shards(gcs, bucket, upload):
    """No object the old manifest names is written before the new manifest: the new shards go
    to a folder of their own, and the old ones are deleted after the switch."""
    from apache_beam.io.filesystems import FileSystems

    upload(bucket, "raw/a.jsonl", "".join(f'{{"id": {i}}}\n' for i in range(6)).encode())
    upload(bucket, "raw/b.jsonl", "".join(f'{{"id": {i}}}\n' for i in range(9)).encode())
    out = f"gs://{bucket}/ds"
    build(BuildConfig(inputs=(f"gs://{bucket}/raw/a.jsonl",), output=out, num_shards=2))
    config = BuildConfig(
        inputs=(f"gs://{bucket}/raw/b.jsonl",), output=out, num_shards=2, overwrite=True
    )
    build(config)
    names = sorted(
        m.path[len(out) + 1 :] for m in FileSystems.match([f"{out}/**"])[0].metadata_list
    )
    assert len(names) == 3 and names[-1] == "manifest.json", names
    folder = names[0].split("/")[0]
    assert folder.startswith("build-") and names[:2] == [
        f"{folder}/data-00000-of-00002.array_record",
        f"{folder}/data-00001-of-00002.array_record",
    ]
    source = tpufeed.Dataset.open(out, verify=True).source
    assert [r["id"] for r in source.__getitems__(range(9))] == list(range(9))
    build(config)  # and back to the plain names, which the manifest no longer uses
    names = sorted(
        m.path[len(out) + 1 :] for m in FileSystems.match([f"{out}/**"])[0].metadata_list
    )
    assert names == [
        "data-00000-of-00002.array_record",
        "data-00001-of-00002.array_record",
        "manifest.json",
    ]
