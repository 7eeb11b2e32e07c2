"""tf.train.Example parsing and writing without TensorFlow, checked against TensorFlow."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.sources.tfrecord import write_tfrecords
from tpufeed.transforms import ParseExample, encode_example, parse_example

_names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
_values = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6).map(lambda v: np.array(v, np.int64)),
    st.lists(st.floats(width=32, allow_nan=False), max_size=6).map(
        lambda v: np.array(v, np.float32)
    ),
    st.binary(max_size=20),
    st.lists(st.binary(max_size=5), min_size=2, max_size=4),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_names, _values, max_size=5))
def test_encode_then_parse_round_trips(features):
    parsed = parse_example(encode_example(features))
    assert parsed.keys() == features.keys()
    for key, value in features.items():
        if isinstance(value, np.ndarray):
            assert parsed[key].dtype == value.dtype or value.size == 0
            np.testing.assert_array_equal(parsed[key], value)
        else:
            assert parsed[key] == value


@pytest.mark.parametrize(
    "low, high", [(0, 255), (-1000, 1000), (0, 1 << 40), (-(2**63), 2**63 - 1)]
)
@pytest.mark.parametrize("count", [65, 3072])  # past the few read one by one
def test_long_int_and_float_lists_round_trip(low, high, count):
    rng = np.random.default_rng(count)
    ints = rng.integers(low, high, count, dtype=np.int64, endpoint=True)
    ints[:2] = [low, high]
    floats = rng.standard_normal(count).astype(np.float32)
    parsed = parse_example(encode_example({"i": ints, "f": floats}))
    np.testing.assert_array_equal(parsed["i"], ints)
    np.testing.assert_array_equal(parsed["f"], floats)
    assert parsed["i"].dtype == np.int64 and parsed["f"].dtype == np.float32


def test_encoding_is_deterministic_and_key_order_free():
    a = encode_example({"b": 1, "a": [1.5, 2.5], "c": "text"})
    assert a == encode_example({"c": "text", "a": [1.5, 2.5], "b": 1})


def test_unpacked_encodings_parse_too():
    # Hand-built: feature "n" as two unpacked varints, "f" as one unpacked fixed32.
    int64_list = b"\x08\x05\x08\x96\x01"  # values 5 and 150, unpacked
    float_list = b"\x0d" + np.float32(0.5).tobytes()  # one fixed32

    def entry(name: bytes, feature: bytes) -> bytes:
        body = b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(feature)]) + feature
        return b"\x0a" + bytes([len(body)]) + body

    features = entry(b"n", b"\x1a" + bytes([len(int64_list)]) + int64_list) + entry(
        b"f", b"\x12" + bytes([len(float_list)]) + float_list
    )
    parsed = parse_example(b"\x0a" + bytes([len(features)]) + features)
    assert parsed["n"].tolist() == [5, 150] and parsed["f"].tolist() == [0.5]


@pytest.mark.parametrize(
    "data, match",
    [
        (b"\x0a\x05abc", "claims 5 bytes"),
        (b"\x0a\x02\x0a\x80", "truncated varint|claims"),
        (b"\x0b", "wire type 3"),
        (b"\x0a\x04\x0a\x02\x12\x00", "has no name"),
    ],
)
def test_malformed_examples_raise_value_error(data, match):
    with pytest.raises(ValueError, match=match):
        parse_example(data)


def test_features_come_in_name_order_as_writable_arrays():
    parsed = parse_example(encode_example({"z": [1.5, 2.5], "a": np.arange(100), "m": b"x"}))
    assert list(parsed) == ["a", "m", "z"]
    parsed["z"][0] = 7.0  # the caller's own arrays, not views of the record's bytes
    parsed["a"][0] = 7
    assert parsed["z"].tolist() == [7.0, 2.5] and parsed["a"][:2].tolist() == [7, 1]


def test_parsing_imports_protobuf_not_tensorflow():
    """protobuf's parser, with the Example classes made here: no TensorFlow import, and
    TensorFlow's own classes still register when it is imported after (no name clash)."""
    code = textwrap.dedent("""
        import sys
        from tpufeed.transforms import encode_example, parse_example
        assert parse_example(encode_example({"a": 3}))["a"].tolist() == [3]
        print(sorted(m for m in ("tensorflow", "google.protobuf") if m in sys.modules))
        try:
            import tensorflow as tf
        except ImportError:
            raise SystemExit(0)
        example = tf.train.Example()
        example.features.feature["b"].int64_list.value.append(4)
        assert parse_example(example.SerializeToString())["b"].tolist() == [4]
        print("tensorflow after: ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = ["['google.protobuf']"]
    if importlib.util.find_spec("tensorflow") is not None:
        expected.append("tensorflow after: ok")
    assert proc.stdout.splitlines() == expected


def test_parse_example_shapes_and_missing_features():
    data = encode_example({"label": 4, "image": b"png", "box": [1.0, 2.0, 3.0, 4.0]})
    out = ParseExample({"label": (), "image": (), "box": (2, 2)})(data)
    assert out["label"].shape == () and int(out["label"]) == 4
    assert out["image"] == b"png" and out["box"].shape == (2, 2)
    with pytest.raises(KeyError, match="'missing' is missing"):
        ParseExample({"missing": None})(data)
    with pytest.raises(ValueError, match="do not fit shape"):
        ParseExample({"box": (3,)})(data)
    assert ParseExample(key="raw")({"raw": data})["label"].tolist() == [4]


def test_parse_example_in_dataset_map(tmp_path):
    write_tfrecords(
        tmp_path / "ex.tfrecord",
        [encode_example({"label": i, "x": [float(i)] * 3}) for i in range(10)],
    )
    ds = (
        tpufeed.Dataset.from_tfrecord(str(tmp_path / "ex.tfrecord"))
        .map(ParseExample({"label": (), "x": (3,)}))
        .batch(5)
    )
    batches = list(ds)
    assert batches[1]["label"].tolist() == [5, 6, 7, 8, 9]
    assert batches[0]["x"].shape == (5, 3) and batches[0]["x"].dtype == np.float32


def test_a_bad_example_in_dataset_map_names_file_and_record(tmp_path):
    write_tfrecords(tmp_path / "ex.tfrecord", [encode_example({"a": 1}), b"\x0b junk"])
    ds = tpufeed.Dataset.from_tfrecord(str(tmp_path / "ex.tfrecord")).map(ParseExample())
    with pytest.raises(tpufeed.TransformError, match=r"ex\.tfrecord record 1"):
        list(ds)


@pytest.mark.slow
def test_interoperates_with_tensorflow():
    tf = pytest.importorskip("tensorflow")
    example = tf.train.Example()
    example.features.feature["ids"].int64_list.value.extend([1, -7, 2**40])
    example.features.feature["f"].float_list.value.extend([0.25, -1.5])
    example.features.feature["s"].bytes_list.value.append(b"hello")
    parsed = parse_example(example.SerializeToString())
    assert parsed["ids"].tolist() == [1, -7, 2**40] and parsed["s"] == b"hello"
    assert parsed["f"].tolist() == [0.25, -1.5]
    ours = encode_example({"ids": [3, -1], "f": [0.5], "s": "x"})
    spec = {
        "ids": tf.io.FixedLenFeature([2], tf.int64),
        "f": tf.io.FixedLenFeature([1], tf.float32),
        "s": tf.io.FixedLenFeature([], tf.string),
    }
    got = tf.io.parse_single_example(ours, spec)
    assert got["ids"].numpy().tolist() == [3, -1] and got["s"].numpy() == b"x"
    assert tf.train.Example.FromString(ours).features.feature["f"].float_list.value[0] == 0.5
