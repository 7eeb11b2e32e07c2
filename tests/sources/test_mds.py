"""Dataset.from_mds over shards that MosaicML Streaming's own MDSWriter wrote.

tests/data/mds/ holds them (every column type; zstd and gz; hashed; sub-datasets), written by
tests/data/mds/write_fixtures.py in an environment with Streaming, together with what
Streaming's reader gave for every sample (`expected.json`). Each test here compares with that;
`test_fresh_shards_beside_streaming` writes and reads new ones with Streaming itself when
`TPUFEED_STREAMING_PYTHON` names a python that has it.
"""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal

import numpy as np
import pytest

import tpufeed
from tests.sources.mds_data import (
    DATA,
    EXPECTED,
    assert_like_streaming,
    copy_of,
    edit_index,
    flip,
)
from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceNotFoundError
from tpufeed.sources.mds import shard as mds_shard
from tpufeed.sources.mds.source import MDSSource


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Decompressed copies go under tmp_path."""
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", ["plain", "zstd", "gz", "nested"])
def test_records_and_order_are_streamings(name):
    records = list(tpufeed.Dataset.from_mds(DATA / name))
    assert_like_streaming(records, EXPECTED[name])


def test_every_column_type_is_read():
    columns = EXPECTED["columns"]["plain"]
    assert set(columns.values()) >= {"bytes", "str", "int", "json", "jpeg", "png", "pil"}
    assert {"ndarray", "ndarray:int16", "ndarray:float32:2,3", "list[pil]", "jpeg_array"} <= set(
        columns.values()
    )
    source = MDSSource(DATA / "plain")
    assert len(source.files) == 3 and len(source) == 9
    first = source[4]
    assert first["nd_any"].shape == (2, 2, 300) and first["nd_fixed"].dtype == np.float32
    assert isinstance(first["jpeg"], bytes) and first["pil"].shape == (4, 5, 3)
    assert first["pil_l"].shape == (4, 5, 1) and isinstance(first["str_decimal"], Decimal)


def test_random_access_reads_each_sample_wherever_it_is():
    source = MDSSource(DATA / "zstd")
    order = np.random.default_rng(0).permutation(len(source))
    records = source.__getitems__(order)
    assert [r["id"] for r in records] == order.tolist()
    assert source.describe(5).startswith(str(DATA / "zstd" / "shard.0000"))


def test_compressed_shards_are_decompressed_once(tmp_path):
    list(tpufeed.Dataset.from_mds(DATA / "zstd"))
    copies = sorted((tmp_path / "cache" / "mds").glob("*.raw"))
    assert len(copies) == 3
    stamps = [c.stat().st_mtime_ns for c in copies]
    list(tpufeed.Dataset.from_mds(DATA / "zstd").shuffle(seed=1))
    assert [c.stat().st_mtime_ns for c in copies] == stamps


def test_global_shuffle_resume_and_shard():
    ds = tpufeed.Dataset.from_mds(DATA / "gz").map(lambda e: {"id": e["id"], "vec": e["vec"]})
    shuffled = ds.shuffle(seed=3).batch(4)
    ids = [int(i) for b in shuffled for i in b["id"]]
    assert sorted(ids) == list(range(12)) and ids != list(range(12))
    it = iter(shuffled)
    next(it)
    state = it.get_state()
    rest = [b["id"].tolist() for b in it]
    assert [b["id"].tolist() for b in shuffled.iterator(state)] == rest
    halves = [[e["id"] for e in ds.shuffle(seed=3).shard(k, 2)] for k in range(2)]
    assert sorted(halves[0] + halves[1]) == list(range(12)) and not set(halves[0]) & set(halves[1])


@pytest.mark.multiprocess
def test_workers_give_the_same_order():
    ds = tpufeed.Dataset.from_mds(DATA / "zstd").shuffle(seed=5)
    alone = [e["id"] for e in ds]
    assert [e["id"] for e in ds.workers(2)] == alone


def test_pkl_is_refused_by_name():
    with pytest.raises(InvalidArgumentError, match=r"column 'obj' is 'pkl'.*unpickles nothing"):
        tpufeed.Dataset.from_mds(DATA / "pkl")


def test_a_shard_whose_hash_differs_is_refused_naming_it(tmp_path, monkeypatch):
    folder = copy_of("plain", tmp_path)
    flip(folder / "shard.00001.mds", -10)
    source = MDSSource(folder)
    assert source[0]["int"] == 0  # shard 0 is intact
    with pytest.raises(CorruptDataError, match=r"shard\.00001\.mds: its xxh64 is \w+, the index"):
        source[4]
    checked = []
    real = mds_shard.checked_hash
    monkeypatch.setattr(
        mds_shard, "checked_hash", lambda *args: checked.append(args[2]) or real(*args)
    )
    assert [e["int"] for e in tpufeed.Dataset.from_mds(folder).ignore_errors(3)] == [
        (-1) ** i * (i << 40) for i in (0, 1, 2, 6, 7, 8)
    ]  # each of the refused shard's records skipped, the shard checked once
    assert checked.count(str(folder / "shard.00001.mds")) == 1


def test_damage_without_hashes_names_file_record_and_column(tmp_path):
    folder = copy_of("nested/part-a", tmp_path)
    edit_index(folder, lambda index: [s["raw_data"].update(hashes={}) for s in index["shards"]])
    shard = folder / "shard.00000.mds"
    count = int.from_bytes(shard.read_bytes()[:4], "little")
    offsets = np.frombuffer(shard.read_bytes()[4 : 8 + 4 * count], "<u4")
    data = bytearray(shard.read_bytes())
    data[offsets[1] : offsets[1] + 4] = (10**6).to_bytes(
        4, "little"
    )  # record 1's first size: img's
    shard.write_bytes(bytes(data))
    source = MDSSource(folder)
    assert source[0]["id"] == 0
    with pytest.raises(CorruptDataError, match=r"shard\.00000\.mds record 1: column 'img' ends"):
        source[1]


def test_a_damaged_compressed_shard_is_refused(tmp_path):
    """The compressed file's hash is gone: the raw file's, checked after decompressing, finds
    the damage (zstd frames carry no checksum of their own). With no hash at all, a truncated
    file fails to decompress."""
    folder = copy_of("zstd", tmp_path)
    edit_index(folder, lambda index: [s["zip_data"].update(hashes={}) for s in index["shards"]])
    flip(folder / "shard.00002.mds.zstd", 20)
    source = MDSSource(folder)
    with pytest.raises(
        CorruptDataError, match=r"shard\.00002\.mds\.zstd \(decompressed\): its xxh3_64"
    ):
        source[len(source) - 1]
    edit_index(folder, lambda index: [s["raw_data"].update(hashes={}) for s in index["shards"]])
    shard = folder / "shard.00001.mds.zstd"
    shard.write_bytes(shard.read_bytes()[:-30])
    edit_index(
        folder, lambda index: index["shards"][1]["zip_data"].update(bytes=shard.stat().st_size)
    )
    with pytest.raises(
        CorruptDataError, match=r"shard\.00001\.mds\.zstd: its zstd stream: (decompresses to|\w)"
    ):
        MDSSource(folder)[5]


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (lambda i: i.update(version=1), CorruptDataError, r"index\.json: index version 1"),
        (
            lambda i: i["shards"][1].update(format="json"),
            CorruptDataError,
            r"shard 1: shard format 'json'",
        ),
        (
            lambda i: i["shards"][0].update(compression="br"),
            InvalidArgumentError,
            r"compression 'br' is not read",
        ),
        (
            lambda i: i["shards"][0].update(column_sizes=[8]),
            CorruptDataError,
            r"must be lists of one length",
        ),
        (
            lambda i: i["shards"][0]["column_encodings"].__setitem__(0, "int128"),
            InvalidArgumentError,
            r"'int128', which MDS does not define",
        ),
        (
            lambda i: i["shards"][2]["raw_data"].update(bytes=5),
            CorruptDataError,
            r"shard\.00002\.mds: .* the index says 5",
        ),
        (
            lambda i: i["shards"][2]["raw_data"].update(basename="gone.mds"),
            SourceNotFoundError,
            r"gone\.mds",
        ),
        (
            lambda i: i["shards"][0]["raw_data"].update(basename="../zstd/index.json"),
            CorruptDataError,
            r"escapes the dataset root",
        ),
    ],
)
def test_a_bad_index_is_refused_naming_it(tmp_path, edit, error, message):
    folder = copy_of("plain", tmp_path)
    edit_index(folder, edit)
    with pytest.raises(error, match=message):
        MDSSource(folder)


def test_a_folder_without_an_index_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceNotFoundError, match=r"holds no index\.json"):
        tpufeed.Dataset.from_mds(tmp_path / "empty")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "index.json").write_text("{not json")
    with pytest.raises(CorruptDataError, match=r"broken/index\.json: not valid JSON"):
        tpufeed.Dataset.from_mds(tmp_path / "broken")


def test_a_shard_count_that_differs_from_the_index_is_refused(tmp_path):
    folder = copy_of("nested/part-a", tmp_path)
    edit_index(folder, lambda index: index["shards"][0].update(samples=7))
    with pytest.raises(
        CorruptDataError,
        match=r"shard\.00000\.mds: the shard says it holds \d+ samples, the index says 7",
    ):
        MDSSource(folder)[0]


@pytest.mark.emulator
def test_gcs_folder_reads_like_the_local_one(gcs, bucket, upload):
    for folder in ("zstd", "nested/part-a", "nested/part-b"):
        for path in sorted((DATA / folder).iterdir()):
            upload(bucket, f"{folder}/{path.name}", str(path))
    zstd = list(tpufeed.Dataset.from_mds(f"gs://{bucket}/zstd"))
    assert_like_streaming(zstd, EXPECTED["zstd"])
    nested = tpufeed.Dataset.from_mds(f"gs://{bucket}/nested/").shuffle(seed=2)
    assert sorted(e["id"] for e in nested) == list(range(12))
    with pytest.raises(InvalidArgumentError, match="need a shard cache"):
        tpufeed.Dataset.from_mds(f"gs://{bucket}/zstd", cache_bytes=0)


WRITE_AND_READ = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from write_fixtures import tagged
from streaming import MDSWriter, StreamingDataset

out = sys.argv[1]
columns = {"a": "ndarray", "b": "str", "c": "float32", "d": "json", "e": "bytes"}
rng = np.random.default_rng(7)
with MDSWriter(out=out, columns=columns, compression="zstd:7", hashes=["sha1", "xxh64"],
               size_limit=3000) as writer:
    for i in range(60):
        writer.write({"a": rng.integers(0, 9, (i % 4 + 1, 3)).astype("int32"), "b": "x" * i,
                      "c": np.float32(i / 3), "d": {"i": i}, "e": rng.bytes(i % 50)})
ds = StreamingDataset(local=out, shuffle=False, batch_size=1)
print(json.dumps([tagged(dict(ds[i])) for i in range(len(ds))]))
"""


@pytest.mark.slow
def test_fresh_shards_beside_streaming(tmp_path):
    """New shards written and read by Streaming in its own environment, read here alike."""
    python = os.environ.get("TPUFEED_STREAMING_PYTHON")
    if not python:
        pytest.skip("set TPUFEED_STREAMING_PYTHON to a python that has mosaicml-streaming")
    script = tmp_path / "write_and_read.py"
    script.write_text(WRITE_AND_READ)
    result = subprocess.run(
        [python, str(script), str(tmp_path / "out"), str(DATA)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    expected = json.loads(result.stdout.strip().splitlines()[-1])
    for name in os.listdir(tmp_path / "out"):  # Streaming's own decompressed copies
        if name.endswith(".mds"):
            os.remove(tmp_path / "out" / name)
    assert_like_streaming(list(tpufeed.Dataset.from_mds(tmp_path / "out")), expected)
    assert len(MDSSource(tmp_path / "out").files) > 1
