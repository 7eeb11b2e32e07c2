"""Dataset.open over gs://: a folder written by WriteShards reads from the emulator as its local
copy does, through the shard cache, with every shard checked against the manifest."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time

import google_crc32c
import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")
pytest.importorskip("google.cloud.storage")


import tpufeed  # noqa: E402
from tpufeed.beam import WriteShards, in_process_runner  # noqa: E402
from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceNotFoundError  # noqa: E402
from tpufeed.sources.built import manifest as manifest_module  # noqa: E402
from tpufeed.sources.built.manifest import ManifestSource  # noqa: E402
from tpufeed.sources.built.verified_shard import VerifiedShard  # noqa: E402
from tpufeed.storage.cache.shard_cache import ShardCache  # noqa: E402
from tpufeed.storage.remote import RemoteFile  # noqa: E402

pytestmark = pytest.mark.emulator

N, SHARDS = 40, 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """built(file_format) -> a local dataset folder written by WriteShards (once per format)."""
    folders = {}

    def build(file_format: str = "array_record"):
        if file_format not in folders:
            folder = tmp_path_factory.mktemp(file_format) / "ds"
            records = [
                {"x": np.full(i % 5, i, np.int64), "label": i, "name": f"r{i}"} for i in range(N)
            ]
            with beam.Pipeline(runner=in_process_runner()) as p:
                (
                    p
                    | beam.Create(records, reshuffle=False)
                    | WriteShards(str(folder), num_shards=SHARDS, format=file_format)
                )
            folders[file_format] = folder
        return folders[file_format]

    return build


def _upload_dataset(upload, bucket: str, folder, prefix: str = "ds") -> str:
    for name in sorted(os.listdir(folder)):
        upload(bucket, f"{prefix}/{name}", str(folder / name))
    return f"gs://{bucket}/{prefix}"


def _manifest(folder) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _shard_sizes(folder) -> dict[str, int]:
    return {f"ds/{s['path']}": s["num_bytes"] for s in _manifest(folder)["shards"]}


def _assert_same_records(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(b[key], np.ndarray):
                assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key])
            else:
                assert a[key] == b[key]


@pytest.mark.parametrize(
    "file_format,cache_bytes", [("array_record", None), ("tfrecord", None), ("tfrecord", 0)]
)
def test_a_gcs_dataset_reads_as_its_local_copy(
    gcs, bucket, upload, built, tmp_path, file_format, cache_bytes
):
    folder = built(file_format)
    url = _upload_dataset(upload, bucket, folder)
    local = tpufeed.Dataset.open(folder)
    expected = local.source.__getitems__(range(N))
    for path in (url, url + "/", url + "/manifest.json"):
        remote = tpufeed.Dataset.open(path, cache_dir=tmp_path / "c", cache_bytes=cache_bytes)
        assert remote.source.manifest_path == f"{url}/manifest.json"
        assert [f.path for f in remote.source.files] == [
            f"{url}/{s['path']}" for s in _manifest(folder)["shards"]
        ]
        assert remote.schema == local.schema and remote.schema["x"]["dtype"] == "int64"
        assert remote.fingerprint() == local.fingerprint()  # states move between the two
        _assert_same_records(remote.source.__getitems__(range(N)), expected)
    # A windowed shuffle (read-ahead in plan order) gives the local order; a local state resumes.
    pipeline = [
        tpufeed.Dataset.open(p, cache_dir=tmp_path / "c", cache_bytes=cache_bytes)
        .shuffle(seed=3, window=2)
        .map(lambda r: r["label"])
        for p in (folder, url)
    ]
    order = list(pipeline[0])
    assert sorted(order) == list(range(N)) and list(pipeline[1]) == order
    it = iter(pipeline[0])
    head = [next(it) for _ in range(N // 3)]
    assert head + list(pipeline[1].iterator(it.get_state())) == order
    copies = os.path.join(tmp_path, "c", "shards")
    cached = [n for n in os.listdir(copies) if n.endswith(".data")] if os.path.isdir(copies) else []
    assert len(cached) == (0 if cache_bytes == 0 else SHARDS)


def _quiet(gcs, settle_s: float = 0.5, limit_s: float = 30.0) -> None:
    """Returns once the proxy has seen no request for `settle_s`: the first epoch's reads are
    over. A worker still booting when the consumer had the whole epoch (the parent ran its
    chunks meanwhile) may have asked for a shard's footer (its record count) just before."""
    deadline = time.monotonic() + limit_s
    seen = -1
    while time.monotonic() < deadline:
        now = len(gcs.counters.paths)
        if now == seen:
            return
        seen = now
        time.sleep(settle_s)
    raise AssertionError(f"requests still arriving after {limit_s} s")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_epoch_downloads_nothing(gcs, bucket, upload, built, tmp_path, workers):
    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    gcs.reset()
    ds = (
        tpufeed.Dataset.open(url, cache_dir=tmp_path / "c")
        .shuffle(seed=2, window=2)
        .map(lambda r: r["label"])
        .repeat(2)
        .workers(workers)
    )
    it = iter(ds)
    first = [next(it) for _ in range(N)]
    assert sorted(first) == list(range(N))
    _quiet(gcs)  # a worker that started late may still be counting shard 0 by its footer
    assert set(gcs.whole_downloads(_shard_sizes(folder)).values()) == {1}  # each shard once
    gcs.reset()
    second = list(it)
    assert sorted(second) == list(range(N)) and second != first
    assert (gcs.counters.only(bucket).media_requests, gcs.counters.only(bucket).media_bytes) == (
        0,
        0,
    )
    # A restarted job (new source, same cache directory) downloads the manifest alone.
    again = tpufeed.Dataset.open(url, cache_dir=tmp_path / "c").shuffle(seed=2, window=2)
    assert [r["label"] for r in again] == first
    assert gcs.counters.only(bucket).media_requests == 1
    assert gcs.counters.only(bucket).media_bytes == os.path.getsize(folder / "manifest.json")


def test_a_replaced_shard_is_refused_naming_its_url_and_both_checksums(
    gcs, bucket, upload, built, tmp_path
):
    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    entry = _manifest(folder)["shards"][1]
    shard_url = f"{url}/{entry['path']}"
    data = bytearray((folder / entry["path"]).read_bytes())
    data[100] ^= 0xFF
    upload(bucket, f"ds/{entry['path']}", bytes(data))
    crc = f"{google_crc32c.value(bytes(data)):08x}"
    gcs.reset()
    with pytest.raises(
        CorruptDataError,
        match=re.escape(f"{shard_url}: CRC32C is {crc}, the manifest says {entry['crc32c']}"),
    ):
        tpufeed.Dataset.open(url, verify=True, cache_dir=tmp_path / "c")
    assert (
        gcs.counters.only(bucket).media_requests == 1
    )  # the manifest: shards are checked by metadata
    source = tpufeed.Dataset.open(url, cache_dir=tmp_path / "c").source  # checks on first read
    local = tpufeed.Dataset.open(folder).source
    first = _manifest(folder)["shards"][0]["num_records"]
    assert [source[i]["label"] for i in (0, N - 1)] == [local[i]["label"] for i in (0, N - 1)]
    with pytest.raises(CorruptDataError, match=re.escape(shard_url)) as info:
        source[first]
    assert info.value.path == shard_url
    upload(bucket, f"ds/{entry['path']}", bytes(data[:-1000]))
    with pytest.raises(
        CorruptDataError,
        match=re.escape(
            f"{shard_url}: shard is {len(data) - 1000:,} bytes, the manifest says "
            f"{entry['num_bytes']:,}"
        ),
    ):
        tpufeed.Dataset.open(url, verify=True, cache_dir=tmp_path / "c")


def test_a_record_count_disagreeing_with_the_shard_is_refused(gcs, bucket, upload, built, tmp_path):
    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    manifest = _manifest(folder)
    manifest["shards"][0]["num_records"] -= 1
    manifest["num_records"] -= 1
    upload(bucket, "ds/manifest.json", json.dumps(manifest).encode())
    error = r"/ds/data-00000-of-00004\.array_record: shard holds \d+ records, the manifest says"
    with pytest.raises(CorruptDataError, match=error):  # verify counts (by the footer)
        tpufeed.Dataset.open(url, verify=True, cache_dir=tmp_path / "c")
    source = tpufeed.Dataset.open(url, cache_dir=tmp_path / "c").source
    with pytest.raises(CorruptDataError, match=error):
        source[0]


@pytest.mark.parametrize(
    "name",
    [
        "../x.array_record",
        "/x.array_record",
        "a/../../x.array_record",
        "gs://other/x.array_record",
        "sub//x.array_record",
        "",
    ],
)
def test_shard_paths_leaving_the_dataset_prefix_are_refused(gcs, bucket, upload, built, name):
    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    upload(bucket, "x.array_record", (folder / _manifest(folder)["shards"][1]["path"]).read_bytes())
    manifest = _manifest(folder)
    manifest["shards"][1]["path"] = name
    upload(bucket, "ds/manifest.json", json.dumps(manifest).encode())
    gcs.reset()
    with pytest.raises(CorruptDataError, match="shard path") as info:
        tpufeed.Dataset.open(url)
    assert repr(name) in str(info.value) and f"{url}/manifest.json" in str(info.value)
    assert gcs.counters.only(bucket).media_requests == 1  # refused before any shard was looked at


def test_a_missing_shard_or_manifest_is_not_found(gcs, emulator, bucket, upload, built):
    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    name = _manifest(folder)["shards"][2]["path"]
    emulator.client().bucket(bucket).blob(f"ds/{name}").delete()
    with pytest.raises(
        SourceNotFoundError,
        match=re.escape(f"{url}/{name}: shard named in the manifest {url}/manifest.json"),
    ):
        tpufeed.Dataset.open(url)
    with pytest.raises(
        SourceNotFoundError,
        match=re.escape(f"gs://{bucket}/nothing/manifest.json (the folder has no manifest"),
    ):
        tpufeed.Dataset.open(f"gs://{bucket}/nothing")
    with pytest.raises(SourceNotFoundError, match=f"gs://{bucket}/ds/other.json$"):
        tpufeed.Dataset.open(f"gs://{bucket}/ds/other.json")


@pytest.mark.parametrize(
    "content,match",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (json.dumps({"format": "other"}).encode(), "'format'"),
        (b"x" * 2000, "2,000 bytes, larger than 1,000 bytes"),
    ],
)
def test_malformed_manifests_are_refused_naming_the_url(
    gcs, bucket, upload, monkeypatch, content, match
):
    monkeypatch.setattr(manifest_module, "_MAX_MANIFEST_BYTES", 1000)
    url = upload(bucket, "ds/manifest.json", content)
    gcs.reset()
    with pytest.raises(CorruptDataError, match=match) as info:
        tpufeed.Dataset.open(f"gs://{bucket}/ds")
    assert info.value.path == url
    assert gcs.counters.only(bucket).media_requests == (
        0 if len(content) > 1000 else 1
    )  # too big: not fetched


def test_array_record_shards_need_a_cache(gcs, bucket, upload, built, tmp_path):
    url = _upload_dataset(upload, bucket, built())
    with pytest.raises(InvalidArgumentError, match="cache_bytes=0"):
        tpufeed.Dataset.open(url, cache_dir=tmp_path / "c", cache_bytes=0)


@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_objects_without_a_crc32c_in_their_metadata_are_summed(
    gcs, bucket, upload, built, tmp_path, cache_bytes
):
    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    entry = _manifest(folder)["shards"][0]
    shard = ManifestSource(url, cache=ShardCache(tmp_path / "c")).files[0]
    remote = RemoteFile(
        dataclasses.replace(shard.remote.obj, crc32c=None), ShardCache(tmp_path / "c", cache_bytes)
    )
    gcs.reset()
    VerifiedShard(shard.path, entry, "array_record", remote).verify()
    assert gcs.counters.only(bucket).media_bytes == entry["num_bytes"]  # read whole, once
    wrong = VerifiedShard(shard.path, {**entry, "crc32c": "00000000"}, "array_record", remote)
    with pytest.raises(
        CorruptDataError, match=f"CRC32C is {entry['crc32c']}, the manifest says 00000000"
    ):
        wrong.verify()


def test_inspect_describes_a_gcs_dataset_by_its_folder(
    gcs, bucket, upload, built, tmp_path, capsys, monkeypatch
):
    from tpufeed import cli

    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "c"))
    assert cli.main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{url}/manifest.json: {N:,} records in {SHARDS} array_record shards")
    assert "schema x:" in out and "record 0:" in out


def test_bench_runs_a_gcs_dataset_by_its_folder(gcs, bucket, upload, built, tmp_path, monkeypatch):
    import argparse

    from tpufeed.cli.bench import make_target
    from tpufeed.sources.built.manifest import is_dataset_path

    folder = built()
    url = _upload_dataset(upload, bucket, folder)
    assert is_dataset_path(url) and is_dataset_path(url + "/manifest.json")
    assert not is_dataset_path(url + "/*.array_record")
    assert not is_dataset_path(url + "/data-00000-of-00004.array_record")
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "c"))
    ds = make_target(argparse.Namespace(target=url, transform=[], batch_size=8))
    assert (
        isinstance(ds.source, ManifestSource) and ds.source.manifest_path == f"{url}/manifest.json"
    )
    assert len(ds.source) == N
    assert ds.source[5]["label"] == tpufeed.Dataset.open(folder).source[5]["label"]
