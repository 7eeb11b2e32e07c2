"""tf_example records: dicts stored as tf.train.Example that tf.data and Grain read without
tpufeed, and that `Dataset.open` decodes back into the dicts that were written."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

import tpufeed  # noqa: E402
from tpufeed.beam import BuildConfig, WriteShards, build, in_process_runner  # noqa: E402
from tpufeed.errors import CodecError, InvalidArgumentError  # noqa: E402
from tpufeed.sources.built.tf_example_records import (  # noqa: E402
    check_example_record,
    decode_example_record,
    encode_example_record,
)


def _records(n: int) -> list[dict]:
    return [
        {
            "label": i,
            "score": i / 4,
            "flag": i % 2 == 0,
            "name": f"r{i}",
            "raw": bytes([i]),
            "image": np.arange(6, dtype=np.uint8).reshape(2, 3) + i,
            "tokens": np.arange(i % 4, dtype=np.int32),
            "weights": np.full(2, i, np.float32),
        }
        for i in range(n)
    ]


def _write(output, records, file_format, num_shards=2) -> dict:
    with beam.Pipeline(runner=in_process_runner()) as p:
        (
            p
            | beam.Create(records, reshuffle=False)
            | WriteShards(
                str(output), num_shards=num_shards, format=file_format, record_format="tf_example"
            )
        )
    with open(os.path.join(output, "manifest.json")) as f:
        return json.load(f)


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            np.testing.assert_array_equal(got[key], value)
        else:
            assert type(got[key]) is type(value) and got[key] == value, key


def test_records_round_trip_with_the_schema():
    record = {
        "i": 7,
        "f": 0.5,
        "b": True,
        "s": "héllo",
        "y": b"\x00\xff",
        "a": np.arange(24, dtype=np.int16).reshape(2, 3, 4),
        "z": np.zeros((0, 3)),
        "u": np.array([1, 2**40], np.uint64),
        "d": np.array(3.25),
        "m": np.ones(2, bool),
    }
    schema = {
        k: {"type": "ndarray", "dtype": v.dtype.name}
        if isinstance(v, np.ndarray)
        else {"type": type(v).__name__}
        for k, v in record.items()
    }
    _assert_same(decode_example_record(encode_example_record(record), schema), record)


def test_without_a_schema_values_come_back_as_example_holds_them():
    got = decode_example_record(
        encode_example_record({"s": "a", "n": 3, "x": np.arange(4, dtype=np.int8).reshape(2, 2)}),
        None,
    )
    assert got["s"] == b"a" and got["n"] == 3
    assert got["x"].dtype == np.int64 and got["x"].shape == (2, 2)


@pytest.mark.parametrize(
    "record, why",
    [
        ({"c": np.ones(2, np.complex64)}, "dtype complex64"),
        ({"n": {"a": 1}}, "is dict"),
        ({"l": [1, 2]}, "is list"),
        ({"u": np.array([2**63], np.uint64)}, "above the int64 range"),
        ({"x": np.ones(2), "x/shape": np.ones(1)}, "clashes with the shape feature of key 'x'"),
    ],
)
def test_values_example_cannot_hold_are_refused_by_key(record, why):
    with pytest.raises(InvalidArgumentError, match=rf"in.txt line 3: key .*{why}"):
        check_example_record(record, "in.txt line 3")


def test_damaged_bytes_are_a_codec_error():
    with pytest.raises(CodecError, match="not a tf.train.Example"):
        decode_example_record(b"\x0a\xff", None)
    with pytest.raises(CodecError, match="do not fit its shape"):
        from tpufeed.transforms.example import encode_example

        decode_example_record(encode_example({"x": np.arange(3), "x/shape": np.array([2])}), None)


@pytest.mark.parametrize("file_format", ["tfrecord", "array_record"])
def test_tpufeed_opens_the_dicts_that_were_written(tmp_path, file_format):
    records = _records(9)
    manifest = _write(tmp_path / "ds", records, file_format)
    assert manifest["record_format"] == "tf.train.Example" and manifest["codec_version"] is None
    assert manifest["schema"]["image"]["dtype"] == "uint8"
    source = tpufeed.Dataset.open(tmp_path / "ds", verify=True).source
    got = sorted(source.__getitems__(range(len(source))), key=lambda r: r["label"])
    for g, want in zip(got, records, strict=True):
        _assert_same(g, want)


def test_tf_data_reads_the_tfrecord_shards_without_tpufeed(tmp_path):
    tf = pytest.importorskip("tensorflow")
    records = _records(7)
    _write(tmp_path / "ds", records, "tfrecord")
    files = sorted(glob.glob(str(tmp_path / "ds" / "*.tfrecord")))
    spec = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "name": tf.io.FixedLenFeature([], tf.string),
        "image": tf.io.FixedLenFeature([6], tf.int64),
        "image/shape": tf.io.FixedLenFeature([2], tf.int64),
        "tokens": tf.io.VarLenFeature(tf.int64),
    }
    ds = tf.data.TFRecordDataset(files).batch(16).map(lambda x: tf.io.parse_example(x, spec))
    batch = next(iter(ds))
    order = np.argsort(batch["label"].numpy())
    assert batch["label"].numpy()[order].tolist() == list(range(7))
    assert batch["name"].numpy()[order].tolist() == [f"r{i}".encode() for i in range(7)]
    np.testing.assert_allclose(batch["score"].numpy()[order], [i / 4 for i in range(7)])
    image = tf.reshape(batch["image"][order[3]], batch["image/shape"][order[3]]).numpy()
    np.testing.assert_array_equal(image, records[3]["image"])
    tokens = tf.sparse.to_dense(batch["tokens"]).numpy()[order]
    assert tokens[3][:3].tolist() == [0, 1, 2]


def test_grain_reads_the_array_record_shards_with_a_parse_step(tmp_path):
    grain = pytest.importorskip("grain")
    tf = pytest.importorskip("tensorflow")
    _write(tmp_path / "ds", _records(8), "array_record")
    files = sorted(glob.glob(str(tmp_path / "ds" / "*.array_record")))

    def parse(data: bytes) -> dict:
        features = tf.train.Example.FromString(data).features.feature
        return {
            "label": features["label"].int64_list.value[0],
            "image": np.reshape(
                features["image"].int64_list.value, features["image/shape"].int64_list.value
            ),
        }

    ds = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(files)).map(parse)
    got = sorted((ds[i] for i in range(len(ds))), key=lambda r: r["label"])
    assert [r["label"] for r in got] == list(range(8))
    np.testing.assert_array_equal(got[5]["image"], np.arange(6).reshape(2, 3) + 5)


def test_bytes_records_are_refused_with_tf_example(tmp_path):
    with pytest.raises(Exception, match="stores dict records, got bytes"):
        _write(tmp_path / "ds", [b"abc"], "tfrecord", num_shards=1)


def test_build_record_format_tf_example_writes_tfrecord_by_default(tmp_path):
    tf = pytest.importorskip("tensorflow")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"t{i}"}) + "\n" for i in range(5)))
    out = tmp_path / "ds"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpufeed.cli",
            "build",
            "--input",
            str(src),
            "--output",
            str(out),
            "--record-format",
            "tf_example",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "shards         1 tfrecord (tf_example records)" in result.stdout
    files = sorted(glob.glob(str(out / "*.tfrecord")))
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "text": tf.io.FixedLenFeature([], tf.string)}
    got = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(files)]
    assert [int(g["id"]) for g in got] == list(range(5))  # the build keeps the input order
    assert [g["text"].numpy() for g in got] == [f"t{i}".encode() for i in range(5)]
    back = tpufeed.Dataset.open(out).source
    assert back[2] == {"id": 2, "text": "t2"}


def test_build_config_refuses_an_unknown_record_format(tmp_path):
    with pytest.raises(InvalidArgumentError, match="--record-format must be one of .*'pickle'"):
        BuildConfig(inputs=("x.jsonl",), output=str(tmp_path), record_format="pickle")


def test_a_transform_output_example_cannot_hold_fails_naming_the_input_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"x": [1, 2], "x/shape": [2]}) + "\n")
    with pytest.raises(Exception, match=r"in.jsonl line 1: key 'x/shape' clashes"):
        build(
            BuildConfig(
                inputs=(str(src),),
                output=str(tmp_path / "ds"),
                file_format="tfrecord",
                record_format="tf_example",
            )
        )
