"""WriteShards on Beam's in-process runner: balance, determinism, atomicity, manifest contents."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

import tpufeed  # noqa: E402
from tpufeed.beam import WriteShards, in_process_runner  # noqa: E402
from tpufeed.errors import InvalidArgumentError, SourceNotFoundError, TpufeedError  # noqa: E402
from tpufeed.sources.tfrecord import TFRecordSource  # noqa: E402


def _records(n: int) -> list[dict]:
    return [{"x": np.full(i % 5, i, np.int64), "label": i, "text": "t" * (i % 3)} for i in range(n)]


def write(output, records, num_shards, file_format="array_record", **kwargs) -> dict:
    with beam.Pipeline(runner=in_process_runner()) as p:
        (
            p
            | beam.Create(records, reshuffle=False)
            | WriteShards(str(output), num_shards=num_shards, format=file_format, **kwargs)
        )
    with open(os.path.join(output, "manifest.json")) as f:
        return json.load(f)


def _files(root) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name), "rb") as f:
            out[name] = f.read()
    return out


def _labels(root) -> list[int]:
    source = tpufeed.Dataset.open(root, verify=True).source
    return [r["label"] for r in source.__getitems__(range(len(source)))]


@pytest.mark.parametrize("num_shards, n", [(1, 20), (3, 20), (7, 20), (5, 3)])
def test_shards_are_balanced_and_hold_every_record_once(tmp_path, num_shards, n):
    manifest = write(tmp_path / "ds", _records(n), num_shards)
    counts = [s["num_records"] for s in manifest["shards"]]
    assert len(counts) == num_shards and sum(counts) == n == manifest["num_records"]
    assert max(counts) - min(counts) <= 1
    assert sorted(_labels(tmp_path / "ds")) == list(range(n))
    assert sorted(os.listdir(tmp_path / "ds")) == sorted(
        [s["path"] for s in manifest["shards"]] + ["manifest.json"]
    )  # no temporaries left


def test_contents_depend_on_the_records_only(tmp_path):
    records = _records(30)
    shuffled = records[:]
    random.Random(1).shuffle(shuffled)
    write(tmp_path / "a", records, 4)
    write(tmp_path / "b", shuffled, 4)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_keyed_records_are_written_in_key_order(tmp_path):
    records = [((7 - i // 10, i % 10), r) for i, r in enumerate(_records(40))]
    random.Random(2).shuffle(records)
    manifest = write(tmp_path / "ds", records, 3, keyed=True)
    expected = [r["label"] for _, r in sorted(records, key=lambda kr: kr[0])]
    assert _labels(tmp_path / "ds") == expected
    assert manifest["build"]["order"] == "key"


def test_keyed_records_past_the_sample_rate_are_in_order_and_balanced(tmp_path):
    """3,000 keys in 8 buckets: one key in 11 is sampled for the cut points; the shards are
    still the key order cut into equal runs, the same from any input order."""
    records = [((i * 7919) % 3000, {"label": (i * 7919) % 3000}) for i in range(3000)]
    manifest = write(tmp_path / "a", records, 2, keyed=True)
    assert _labels(tmp_path / "a") == list(range(3000))
    assert [s["num_records"] for s in manifest["shards"]] == [1500, 1500]
    random.Random(3).shuffle(records)
    write(tmp_path / "b", records, 2, keyed=True)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_manifest_contents(tmp_path):
    manifest = write(tmp_path / "ds", _records(12), 2, build_options={"note": "hello"})
    assert manifest["format"] == "tpufeed-dataset" and manifest["format_version"] == 1
    assert manifest["tpufeed_version"] == tpufeed.__version__
    assert manifest["record_format"] == "tpufeed.codec" and manifest["codec_version"] == 1
    assert manifest["schema"]["x"] == {
        "type": "ndarray",
        "dtype": "int64",
        "shape": [None],
        "ragged_dims": [0],
        "present": 12,
        "optional": False,
    }
    assert manifest["statistics"]["fields"]["x"]["lengths"]["max"] == 4
    assert manifest["statistics"]["inputs"] is None  # a PCollection has no input files
    assert manifest["build"]["num_shards"] == 2 and manifest["build"]["note"] == "hello"
    for shard in manifest["shards"]:
        path = tmp_path / "ds" / shard["path"]
        assert os.path.getsize(path) == shard["num_bytes"]
        assert len(shard["crc32c"]) == 8


def test_bytes_records_and_tfrecord_shards(tmp_path):
    records = [b"r%d" % i for i in range(9)]
    manifest = write(tmp_path / "ds", records, 2, "tfrecord")
    assert manifest["record_format"] == "bytes" and manifest["schema"] is None
    assert all(s["path"].endswith(".tfrecord") for s in manifest["shards"])
    source = tpufeed.Dataset.open(tmp_path / "ds").source
    assert sorted(source.__getitems__(range(9))) == sorted(records)
    raw = TFRecordSource(str(tmp_path / "ds" / "*.tfrecord"))
    assert sorted(raw.__getitems__(range(9))) == sorted(records)


def test_a_mix_of_dicts_and_bytes_fails_and_leaves_nothing_that_opens(tmp_path):
    with pytest.raises(InvalidArgumentError, match="mix of dicts"):
        write(tmp_path / "ds", [{"a": 1}, b"raw"], 1)
    with pytest.raises(SourceNotFoundError):
        tpufeed.Dataset.open(tmp_path / "ds")


def test_rebuilding_replaces_the_dataset_and_its_stale_shards(tmp_path):
    write(tmp_path / "ds", _records(10), 4)
    manifest = write(tmp_path / "ds", _records(6), 2)
    assert sorted(os.listdir(tmp_path / "ds")) == sorted(
        [s["path"] for s in manifest["shards"]] + ["manifest.json"]
    )
    assert sorted(_labels(tmp_path / "ds")) == list(range(6))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_shards": 0}, "num_shards"),
        ({"num_shards": 2, "format": "parquet"}, "format"),
        ({"num_shards": 1, "prefix": "../x"}, "prefix"),
    ],
)
def test_bad_arguments_are_refused_when_the_transform_is_made(tmp_path, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        WriteShards(str(tmp_path), **kwargs)


def test_unsupported_records_name_their_type(tmp_path):
    with pytest.raises(TpufeedError, match="dicts or bytes, got list"):
        write(tmp_path / "ds", [[1, 2]], 1)
