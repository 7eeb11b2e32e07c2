"""gs:// paths, the client, ranged reads and retries: the emulator behind the fault proxy."""

from __future__ import annotations

import logging
import os
import sys

import pytest

from tests.gcs_emulator import upload_shards
from tpufeed.errors import (
    InvalidArgumentError,
    MissingDependencyError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.storage.cache.transfers import coalesce, read_ranges
from tpufeed.storage.local import expand_paths, resolve_paths
from tpufeed.storage.retry import RetryPolicy, call_with_retry
from tpufeed.storage.stores import gcs as gcs_module
from tpufeed.storage.stores.gcs import GcsObject, fetch_into, list_objects, read_range

pytestmark = pytest.mark.emulator

FAST = RetryPolicy(attempts=4, deadline_s=10, initial_backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture
def objects(gcs, bucket, upload):
    names = ["d/a-0.bin", "d/a-1.bin", "d/b-0.bin", "d/sub/a-2.bin", "other.bin"]
    data = {name: os.urandom(1000 + 37 * i) for i, name in enumerate(names)}
    for name, payload in data.items():
        upload(bucket, name, payload)
    return bucket, data


def test_globs_list_one_level_sorted(objects):
    bucket, _ = objects
    assert expand_paths(f"gs://{bucket}/d/a-*.bin") == [
        f"gs://{bucket}/d/a-0.bin",
        f"gs://{bucket}/d/a-1.bin",
    ]
    assert expand_paths(f"gs://{bucket}/d/?-0.bin") == [
        f"gs://{bucket}/d/a-0.bin",
        f"gs://{bucket}/d/b-0.bin",
    ]
    assert expand_paths(f"gs://{bucket}/d/**.bin")[-1] == f"gs://{bucket}/d/sub/a-2.bin"
    assert expand_paths(f"gs://{bucket}/d/[ab]-0.bin") == [
        f"gs://{bucket}/d/a-0.bin",
        f"gs://{bucket}/d/b-0.bin",
    ]


_TRICKY = ["g/a/b.bin", "g/a/x/b.bin", "g/ab.bin", "g/x.bin", "g/y.bin", "g/{x,y}.bin"]


@pytest.mark.parametrize(
    ("glob", "sent", "expected"),
    [
        ("g/*.bin", True, ["g/ab.bin", "g/x.bin", "g/y.bin", "g/{x,y}.bin"]),
        ("g/**", True, _TRICKY),
        # GCS's `**/` also matches no folder (g/a/b.bin): the check here keeps one or more.
        ("g/a/**/b.bin", True, ["g/a/x/b.bin"]),
        ("g/[xy].bin", True, ["g/x.bin", "g/y.bin"]),
        ("g/?.bin", True, ["g/x.bin", "g/y.bin"]),
        # Braces are GCS alternatives but plain characters here; `[!..]` is left to us.
        ("g/{x,y}*", False, ["g/{x,y}.bin"]),
        ("g/[!x].bin", False, ["g/y.bin"]),
    ],
)
def test_globs_are_matched_by_the_server_and_mean_what_they_mean_here(
    gcs, bucket, upload, glob, sent, expected
):
    """GCS matches the glob (`matchGlob`) where its syntax means the same as ours; every name
    it lists is matched here too, so its wider `**/` and its braces change nothing."""
    for name in _TRICKY:
        upload(bucket, name, name.encode())
    gcs.reset()
    assert [o.name for o in list_objects(f"gs://{bucket}/{glob}")] == expected
    listings = [p for p in gcs.counters.only(bucket).paths if "/o?" in p or p.endswith("/o")]
    assert len(listings) == 1
    assert ("matchGlob=" in listings[0]) == sent


def test_what_gcs_is_sent_as_its_glob():
    assert gcs_module.server_glob("train-*.array_record") == "train-*.array_record"
    assert gcs_module.server_glob("d/**/part-[0-9a-f]?.tfrecord") == "d/**/part-[0-9a-f]?.tfrecord"
    for odd in [
        "a***",
        "a{b,c}*",
        "a\\*",
        "x[!a]*",
        "x[^a]*",
        "x[]a]*",
        "x[a/b]*",
        "x[z-a]*",
        "x[ab",
    ]:
        assert gcs_module.server_glob(odd) is None, odd


def test_lists_mix_objects_globs_and_local_files(objects, tmp_path):
    bucket, data = objects
    local = tmp_path / "x.bin"
    local.write_bytes(b"x")
    found = resolve_paths([f"gs://{bucket}/other.bin", str(local), f"gs://{bucket}/d/b-*"])
    assert found[1] == str(local)
    first, last = found[0], found[2]
    assert isinstance(first, GcsObject) and first.url == f"gs://{bucket}/other.bin"
    assert first.size == len(data["other.bin"]) and first.generation > 0
    import google_crc32c

    assert first.crc32c == google_crc32c.value(data["other.bin"])
    assert last.name == "d/b-0.bin"


def test_missing_object_bucket_and_glob_name_the_path(objects):
    bucket, _ = objects
    with pytest.raises(SourceNotFoundError, match=f"gs://{bucket}/d/nope.bin"):
        expand_paths(f"gs://{bucket}/d/nope.bin")
    with pytest.raises(SourceNotFoundError, match="no object matches"):
        expand_paths(f"gs://{bucket}/d/zzz-*.bin")
    with pytest.raises(InvalidArgumentError, match="is a bucket"):
        expand_paths(f"gs://{bucket}")
    with pytest.raises(SourceNotFoundError, match="gs://no-such-bucket-xyz/a"):
        expand_paths("gs://no-such-bucket-xyz/a")


def test_ranged_reads_are_exact_and_coalesced(objects):
    bucket, data = objects
    obj = list_objects(f"gs://{bucket}/d/a-1.bin")[0]
    payload = data["d/a-1.bin"]
    assert read_range(obj, 0, 10) == payload[:10]
    assert read_range(obj, obj.size - 7, obj.size) == payload[-7:]  # an explicit range, not -7
    spans = [(0, 5), (100, 200), (obj.size - 3, obj.size)]
    assert read_ranges(obj, spans, FAST) == [payload[s:e] for s, e in spans]
    with pytest.raises(InvalidArgumentError, match="outside"):
        read_range(obj, 0, obj.size + 1)
    assert coalesce([(0, 10), (15, 20), (100, 110)], max_gap=5, max_span=1000) == [
        (0, 20),
        (100, 110),
    ]
    assert coalesce([(0, 10), (10, 20)], max_gap=5, max_span=15) == [(0, 10), (10, 20)]


def test_reads_survive_faults_at_a_high_rate(objects, gcs, tmp_path):
    bucket, data = objects
    obj = list_objects(f"gs://{bucket}/d/a-0.bin")[0]
    gcs.set_faults(error_503=0.15, reset=0.1, cut=0.1, slow=0.05, delay_s=0.02, seed=1)
    for start in range(0, obj.size, 97):
        assert (
            read_range(obj, start, min(obj.size, start + 300), FAST)
            == data["d/a-0.bin"][start : start + 300]
        )
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, obj.size)
        fetch_into(obj, 0, obj.size, fd, FAST)
    finally:
        os.close(fd)
    assert path.read_bytes() == data["d/a-0.bin"]
    assert gcs.counters.faults > 0


def test_permanent_errors_fail_at_once_with_the_path(objects, gcs):
    bucket, _ = objects
    obj = list_objects(f"gs://{bucket}/d/a-0.bin")[0]
    gcs.reset()
    gcs.set_faults(deny_paths="a-0.bin")
    denied = rf"gs://{bucket}/d/a-0.bin: permission denied \(HTTP 403\)"
    with pytest.raises(SourceError, match=denied):
        read_range(obj, 0, 10, FAST)
    assert gcs.counters.only(bucket).requests == 1
    gcs.reset()
    gone = GcsObject(bucket, "d/gone.bin", 10, 0, None)  # no generation pinned
    missing = rf"gs://{bucket}/d/gone.bin: not found \(HTTP 404\)"
    with pytest.raises(SourceNotFoundError, match=missing):
        read_range(gone, 0, 10, FAST)
    assert gcs.counters.only(bucket).requests == 1


def test_transient_errors_give_up_after_the_attempts(objects, gcs, caplog):
    bucket, _ = objects
    obj = list_objects(f"gs://{bucket}/d/a-0.bin")[0]
    gcs.reset()
    gcs.set_faults(error_503=1.0)
    with caplog.at_level(logging.INFO, logger="tpufeed.gcs"):
        with pytest.raises(SourceError, match=r"gave up .* after 4 attempts.*HTTP 503"):
            read_range(obj, 0, 10, FAST)
    assert gcs.counters.only(bucket).requests == 4
    assert len(caplog.records) == 3
    for record in caplog.records:
        text = record.getMessage().lower()
        assert obj.url in record.getMessage()
        assert "authorization" not in text and "bearer" not in text and "token" not in text


def test_retries_stop_at_the_deadline():
    calls = []

    def flaky(timeout: float):
        calls.append(timeout)
        raise ConnectionResetError("reset by peer")

    policy = RetryPolicy(attempts=1000, deadline_s=0.3, initial_backoff_s=0.05, max_backoff_s=0.1)
    with pytest.raises(SourceError, match="gave up"):
        call_with_retry(flaky, "gs://b/o", "testing", policy)
    assert 2 <= len(calls) < 100


def test_retry_policy_rejects_bad_values():
    with pytest.raises(InvalidArgumentError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(InvalidArgumentError, match="deadline_s"):
        RetryPolicy(deadline_s=-1)


def test_emulator_host_means_anonymous_credentials(gcs):
    from google.auth.credentials import AnonymousCredentials

    assert isinstance(gcs_module.client()._credentials, AnonymousCredentials)


def test_a_missing_library_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    monkeypatch.setattr(gcs_module, "_clients", {})
    with pytest.raises(MissingDependencyError, match=r"pip install tpufeed\[gcs\]"):
        gcs_module.client()


def test_bad_urls_are_refused():
    with pytest.raises(InvalidArgumentError, match="does not name a bucket"):
        expand_paths("gs:///x")
    with pytest.raises(InvalidArgumentError, match="not a gs:// URL"):
        gcs_module.split_url("s3://b/x")


def _generation(emulator, bucket: str, name: str) -> int:
    return emulator.client().bucket(bucket).get_blob(name).generation


@pytest.mark.parametrize(
    "file_format, cache_bytes",
    [("tfrecord", 0), ("array_record", None)],
    ids=["ranged-reads", "a-download-into-the-cache"],
)
def test_an_object_replaced_while_it_is_read_is_named_with_both_generations(
    gcs, emulator, bucket, upload, tmp_path, file_format, cache_bytes
):
    import tpufeed
    from tests.gcs_emulator import shard_records
    from tpufeed.errors import ObjectChangedError
    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.tfrecord import write_tfrecords

    write = write_tfrecords if file_format == "tfrecord" else write_array_records
    open_ = (
        tpufeed.Dataset.from_tfrecord
        if file_format == "tfrecord"
        else (tpufeed.Dataset.from_array_record)
    )
    path = tmp_path / f"one.{file_format}"
    write(str(path), shard_records(0, 50))
    url = upload(bucket, path.name, str(path))
    old = _generation(emulator, bucket, path.name)
    # ArrayRecord: counted from its footer by ranges, downloaded on the first read.
    ds = open_(url, cache_dir=tmp_path / "c", cache_bytes=cache_bytes)
    if cache_bytes == 0:
        assert ds.source[3] == shard_records(0, 50)[3]  # read by ranges before the change
    write(str(path), shard_records(1, 50))  # same size, other bytes
    upload(bucket, path.name, str(path))
    new = _generation(emulator, bucket, path.name)
    with pytest.raises(ObjectChangedError) as raised:
        ds.source[7]
    assert f"{url} changed while it was read (generation {old}, now {new})" in str(raised.value)
    assert "Open the dataset again" in str(raised.value)
    emulator.client().bucket(bucket).blob(path.name).delete()
    with pytest.raises(ObjectChangedError, match=f"{url} was deleted while it was read"):
        ds.source[8]


def test_a_copy_cached_before_the_object_changed_is_read_as_it_was(
    gcs, emulator, bucket, upload, tmp_path
):
    """The cache holds the listed generation, checked: reading it on is exact, not an error."""
    import tpufeed
    from tests.gcs_emulator import shard_records

    url, records = upload_shards(upload, bucket, "kept", 1, 50)
    ds = tpufeed.Dataset.from_array_record(url, cache_dir=tmp_path / "c")
    assert ds.source[0] == records[0]  # downloaded whole
    upload(bucket, "kept/part-00000.array_record", b"other bytes")
    assert [ds.source[i] for i in range(50)] == shard_records(0, 50)


def test_reads_check_the_generation_the_server_says_it_served(objects, gcs, emulator):
    from tpufeed.errors import ObjectChangedError

    bucket, data = objects
    obj = list_objects(f"gs://{bucket}/other.bin")[0]
    assert read_range(obj, 0, 10, FAST) == data["other.bin"][:10]
    # An object pinned at a generation the bucket never had: the proxy, like GCS, says 404.
    stale = GcsObject(obj.bucket, obj.name, obj.size, obj.generation - 1, obj.crc32c)
    with pytest.raises(ObjectChangedError, match=rf"generation {stale.generation}, now "):
        read_range(stale, 0, 10, FAST)
