"""s3:// through boto3 against a real S3 server (moto) behind the fault proxy: listing, ranged
reads, retries, replaced and missing objects, credentials (tpufeed/storage/s3.py)."""

from __future__ import annotations

import os
import sys

import pytest

from tpufeed.errors import (
    InvalidArgumentError,
    MissingDependencyError,
    ObjectChangedError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.observe import counts
from tpufeed.storage import backends
from tpufeed.storage.cache.transfers import read_ranges
from tpufeed.storage.local import expand_paths, resolve_paths
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.retry import RetryPolicy
from tpufeed.storage.stores import s3 as s3_module

pytestmark = pytest.mark.emulator


@pytest.fixture
def objects(s3, s3_bucket, s3_upload):
    data = {
        "d/a-0.bin": os.urandom(1000),
        "d/a-1.bin": os.urandom(3000),
        "d/b-0.bin": b"b" * 10,
        "d/sub/a-2.bin": b"deep",
        "other.bin": b"0123456789" * 50,
    }
    for name, blob in data.items():
        s3_upload(s3_bucket, name, blob)
    return s3_bucket, data


def test_globs_list_one_level_sorted_and_doublestar_recurses(objects):
    bucket, data = objects
    assert expand_paths(f"s3://{bucket}/d/a-*.bin") == [
        f"s3://{bucket}/d/a-0.bin",
        f"s3://{bucket}/d/a-1.bin",
    ]
    assert expand_paths(f"s3://{bucket}/d/**.bin")[-1] == f"s3://{bucket}/d/sub/a-2.bin"
    assert expand_paths(f"s3://{bucket}/d/?-[0]*") == [
        f"s3://{bucket}/d/a-0.bin",
        f"s3://{bucket}/d/b-0.bin",
    ]


def test_objects_carry_size_etag_and_last_modified(objects, tmp_path):
    bucket, data = objects
    local = tmp_path / "x.bin"
    local.write_bytes(b"x")
    found = resolve_paths([f"s3://{bucket}/other.bin", str(local), f"s3://{bucket}/d/b-*"])
    first, middle, last = found
    assert middle == str(local)
    assert isinstance(first, RemoteObject) and first.url == f"s3://{bucket}/other.bin"
    assert first.size == len(data["other.bin"]) and first.generation > 0
    assert first.etag and first.etag.startswith('"') and first.crc32c is None
    assert last.name == "d/b-0.bin" and last.etag and last.version.startswith(last.etag)
    # A glob's listing and a metadata read give the same version.
    assert backends.stat(last.url).version == last.version


def test_missing_objects_globs_and_buckets_are_named(objects):
    bucket, _ = objects
    with pytest.raises(SourceNotFoundError, match=f"s3://{bucket}/d/nope.bin"):
        expand_paths(f"s3://{bucket}/d/nope.bin")
    with pytest.raises(SourceNotFoundError, match="no object matches"):
        expand_paths(f"s3://{bucket}/d/zzz-*.bin")
    with pytest.raises(InvalidArgumentError, match="is a bucket"):
        expand_paths(f"s3://{bucket}")
    with pytest.raises(SourceNotFoundError, match="s3://no-such-bucket-xyz/a"):
        expand_paths("s3://no-such-bucket-xyz/a")
    with pytest.raises(InvalidArgumentError, match="does not name a bucket"):
        expand_paths("s3:///x")


def test_ranged_reads_are_exact(objects, s3):
    bucket, data = objects
    obj = backends.stat(f"s3://{bucket}/d/a-1.bin")
    blob = data["d/a-1.bin"]
    assert backends.read_range(obj, 10, 20) == blob[10:20]
    assert read_ranges(obj, [(0, 1), (2999, 3000), (5, 2500)], RetryPolicy()) == [
        blob[0:1],
        blob[2999:3000],
        blob[5:2500],
    ]
    with pytest.raises(InvalidArgumentError, match="outside its 3000 bytes"):
        backends.read_range(obj, 2990, 3001)
    path = os.path.join(os.environ["TPUFEED_CACHE_DIR"] + "-f.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, 3000)
        backends.fetch_into(obj, 1000, 3000, fd)
        assert os.pread(fd, 2000, 1000) == blob[1000:]
    finally:
        os.close(fd)
    assert s3.counters.media_bytes >= 10 + 1 + 1 + 2495 + 2000


def test_reads_survive_503s_resets_and_cut_answers(objects, s3):
    bucket, data = objects
    obj = backends.stat(f"s3://{bucket}/d/a-1.bin")
    s3.set_faults(error_503=0.25, reset=0.1, cut=0.15, seed=3)
    before = counts.snapshot()
    for start in range(0, 3000, 100):
        assert (
            backends.read_range(obj, start, start + 100) == data["d/a-1.bin"][start : start + 100]
        )
    after = counts.snapshot()
    assert s3.counters.faults > 5
    assert after["s3_retries"] - before["s3_retries"] >= s3.counters.faults
    assert after["s3_requests"] - before["s3_requests"] >= 30 + s3.counters.faults
    assert after["gcs_requests"] == before["gcs_requests"]  # counted as S3's, not GCS's


def test_transient_errors_give_up_after_the_attempts(objects, s3):
    bucket, _ = objects
    obj = backends.stat(f"s3://{bucket}/other.bin")
    s3.set_faults(error_503=1.0)
    policy = RetryPolicy(attempts=3, initial_backoff_s=0.01)
    with pytest.raises(SourceError, match=r"gave up .* after 3 attempts .*S3 call.*HTTP 503"):
        backends.read_range(obj, 0, 10, policy)


def test_permission_denied_names_the_aws_settings(objects, s3):
    bucket, _ = objects
    s3.set_faults(deny_paths="other")
    with pytest.raises(SourceError, match=r"permission denied \(HTTP 403\).*AWS_ACCESS_KEY_ID"):
        backends.stat(f"s3://{bucket}/other.bin")
    assert s3.counters.requests == 1  # not retried


def test_no_credentials_says_what_to_set(objects, monkeypatch):
    bucket, _ = objects
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to look for
    monkeypatch.setattr(s3_module, "_clients", {})
    with pytest.raises(SourceError, match=r"other\.bin: .*AWS_ACCESS_KEY_ID and AWS_SECRET") as e:
        backends.stat(f"s3://{bucket}/other.bin")
    assert not isinstance(e.value, SourceNotFoundError)


def test_an_object_replaced_while_it_is_read_is_named_with_both_etags(objects, s3, s3_upload):
    bucket, _ = objects
    obj = backends.stat(f"s3://{bucket}/other.bin")
    assert backends.read_range(obj, 0, 5) == b"01234"
    s3_upload(bucket, "other.bin", b"9876543210" * 50)  # same size, other bytes
    now = backends.stat(obj.url).etag
    with pytest.raises(ObjectChangedError, match=rf"ETag {obj.etag}, now {now}") as e:
        backends.read_range(obj, 0, 5)
    assert e.value.path == obj.url
    deleted = backends.stat(obj.url)
    s3_module.client(10.0).delete_object(Bucket=bucket, Key="other.bin")
    with pytest.raises(ObjectChangedError, match="was deleted while it was read"):
        backends.read_range(deleted, 0, 5)


def test_a_missing_library_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    monkeypatch.setattr(s3_module, "_clients", {})
    with pytest.raises(MissingDependencyError, match=r"pip install tpufeed\[s3\]"):
        s3_module.client(1.0)


def test_urls_of_unknown_stores_are_not_remote():
    assert backends.is_remote_url("s3://b/x") and backends.is_remote_url("gs://b/x")
    assert not backends.is_remote_url("hdfs://b/x") and not backends.is_remote_url("/s3://x")
    with pytest.raises(InvalidArgumentError, match="gs://, s3://"):
        backends.stat("hdfs://b/x")
