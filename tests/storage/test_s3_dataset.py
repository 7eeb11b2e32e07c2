"""Datasets over s3:// shards, end to end through a real S3 server (moto) and the fault proxy:
the constructors, the shard cache, ranged reads, retries, a built dataset, replaced objects."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import tpufeed
from tests.s3_server import upload_s3_shards
from tpufeed.errors import ObjectChangedError, SourceNotFoundError

pytestmark = pytest.mark.emulator

SHARDS, RECORDS = 4, 120


def _dataset(url: str, cache_dir, file_format: str, cache_bytes: int | None = None):
    if file_format == "array_record":
        return tpufeed.Dataset.from_array_record(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
    return tpufeed.Dataset.from_tfrecord(url, cache_dir=cache_dir, cache_bytes=cache_bytes)


@pytest.mark.parametrize(
    "file_format,workers,cache_bytes",
    [
        ("array_record", 0, None),
        ("array_record", 2, None),
        ("tfrecord", 0, None),
        ("tfrecord", 0, 0),
    ],
)
def test_an_epoch_is_exactly_once_with_a_fifth_of_requests_failing(
    s3, s3_bucket, s3_upload, tmp_path, caplog, file_format, workers, cache_bytes
):
    url, records = upload_s3_shards(s3_upload, s3_bucket, "ds", SHARDS, RECORDS, file_format)
    s3.set_faults(error_503=0.10, reset=0.05, cut=0.05, slow=0.05, delay_s=0.02, seed=4)
    ds = _dataset(url, tmp_path / "c", file_format, cache_bytes)
    with caplog.at_level(logging.WARNING, logger="tpufeed"):
        got = list(ds.shuffle(seed=1).workers(workers))
    assert sorted(got) == sorted(records)
    assert s3.counters.faults >= 0.1 * s3.counters.requests > 0
    # Every failure was retried away, quietly (the S3 server logs each request: not ours).
    assert [r.getMessage() for r in caplog.records if r.name != "werkzeug"] == []


def test_a_second_epoch_reads_nothing_from_s3_once_all_is_cached(
    s3, s3_bucket, s3_upload, tmp_path
):
    url, records = upload_s3_shards(s3_upload, s3_bucket, "warm", SHARDS, RECORDS)
    it = iter(_dataset(url, tmp_path / "c", "array_record").shuffle(seed=2).repeat(2))
    first = [next(it) for _ in records]
    assert sorted(first) == sorted(records) and s3.counters.media_bytes > 0
    s3.reset()
    second = list(it)
    assert sorted(second) == sorted(records) and second != first
    assert (s3.counters.media_requests, s3.counters.media_bytes) == (0, 0)
    copies = os.listdir(tmp_path / "c" / "shards")
    assert len([n for n in copies if n.endswith(".data")]) == SHARDS


def test_uncached_reads_fetch_byte_ranges_only(s3, s3_bucket, s3_upload, tmp_path):
    url, records = upload_s3_shards(s3_upload, s3_bucket, "r", 2, RECORDS, "tfrecord")
    ds = _dataset(url, tmp_path / "c", "tfrecord", cache_bytes=0)
    assert ds.source.__getitems__([5, RECORDS + 7]) == [records[5], records[RECORDS + 7]]
    assert not os.path.isdir(tmp_path / "c" / "shards") or not os.listdir(tmp_path / "c" / "shards")
    assert s3.counters.media_requests > 0


def test_a_shard_replaced_mid_run_raises_object_changed(s3, s3_bucket, s3_upload, tmp_path):
    url, _ = upload_s3_shards(s3_upload, s3_bucket, "moving", 2, RECORDS, "tfrecord")
    ds = _dataset(url, tmp_path / "c", "tfrecord", cache_bytes=0)
    it = iter(ds)
    next(it)
    replaced = tmp_path / "new.tfrecord"
    from tpufeed.sources.tfrecord import write_tfrecords

    write_tfrecords(str(replaced), [b"other"] * RECORDS)
    s3_upload(s3_bucket, "moving/part-00001.tfrecord", str(replaced))
    with pytest.raises(ObjectChangedError, match=r"part-00001\.tfrecord changed while it was read"):
        list(it)


def test_a_copy_of_an_object_without_a_checksum_damaged_on_disk_is_fetched_again(
    s3, s3_bucket, s3_upload, tmp_path, caplog
):
    """S3 keeps no CRC32C for an object uploaded without one: its copy's first CRC32C is kept
    instead, so a byte flipped later in a tar member's data (tar keeps no checksum of its own)
    is found, never read as the sample's bytes."""
    import io
    import tarfile

    from tests.sources.tar_damage import samples, write_shard

    write_shard(tmp_path / "d.tar", "a", count=6)
    s3_upload(s3_bucket, "tars/d.tar", str(tmp_path / "d.tar"))
    url = f"s3://{s3_bucket}/tars/d.tar"

    def read() -> list[bytes]:
        ds = tpufeed.Dataset.from_webdataset(url, cache_dir=tmp_path / "c", cache_bytes=1 << 26)
        return [sample["bin"] for sample in ds]

    assert read() == [s["bin"] for s in samples("a", 6)]
    (copy,) = (tmp_path / "c" / "shards").glob("*.data")
    data = copy.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar if m.name.endswith(".bin"))
    at = member.offset_data + 5
    with open(copy, "r+b") as f:  # in place: a read-ahead still running never sees it cut
        f.seek(at)
        f.write(bytes([data[at] ^ 0xFF]))
    with caplog.at_level(logging.WARNING):
        assert read() == [s["bin"] for s in samples("a", 6)]
    assert "its first copy's is" in caplog.text and copy.name in caplog.text


def test_a_missing_object_names_its_url(s3, s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/none/part-0.array_record"
    with pytest.raises(SourceNotFoundError, match=url):
        tpufeed.Dataset.from_array_record(url, cache_dir=tmp_path / "c")
    with pytest.raises(SourceNotFoundError, match="no object matches"):
        tpufeed.Dataset.from_tfrecord(f"s3://{s3_bucket}/none/*.tfrecord")
    with pytest.raises(SourceNotFoundError, match=f"s3://{s3_bucket}/none/manifest.json"):
        tpufeed.Dataset.open(f"s3://{s3_bucket}/none")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A local dataset folder written by WriteShards, and its records."""
    beam = pytest.importorskip("apache_beam")
    from tpufeed.beam import WriteShards, in_process_runner

    folder = tmp_path_factory.mktemp("built") / "ds"
    records = [{"x": np.full(i % 5, i, np.int64), "label": i} for i in range(40)]
    with beam.Pipeline(runner=in_process_runner()) as p:
        _ = (
            p
            | beam.Create(records, reshuffle=False)
            | WriteShards(str(folder), num_shards=4, format="array_record")
        )
    return folder


def test_a_built_dataset_opens_from_s3_as_its_local_copy(s3, s3_bucket, s3_upload, built, tmp_path):
    for name in sorted(os.listdir(built)):
        s3_upload(s3_bucket, f"ds/{name}", str(built / name))
    url = f"s3://{s3_bucket}/ds"
    local = tpufeed.Dataset.open(built)
    remote = tpufeed.Dataset.open(url, cache_dir=tmp_path / "c", verify=True)
    assert remote.source.manifest_path == f"{url}/manifest.json"
    assert remote.fingerprint() == local.fingerprint()
    order = [r["label"] for r in local.shuffle(seed=3, window=2)]
    assert [r["label"] for r in remote.shuffle(seed=3, window=2)] == order
    assert sorted(order) == list(range(40))
