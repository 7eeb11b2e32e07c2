"""Dict records as `tf.train.Example`: what `--record-format tf_example` writes and reads back.

Each key becomes one feature:

    ==========================  ===============================================================
    bool, int                   int64_list of one value
    float                       float_list of one value (float32: that is all Example holds)
    bytes, str                  bytes_list of one value (str as UTF-8)
    numpy array (any shape)     int64_list (bool and integer dtypes) or float_list (floating
                                dtypes, as float32), flattened in C order, plus the feature
                                `<key>/shape`: an int64_list of the array's shape
    ==========================  ===============================================================

Readers without tpufeed get the flat values and restore an array's shape from `<key>/shape`
(`tf.reshape(x["image"], x["image/shape"])`). tpufeed reads the shards back (`Dataset.open`)
as the dicts that were written: shapes from `<key>/shape`, and dtypes, str and bool from the
manifest's schema; float64 values come back rounded to float32. Complex arrays, uint64 values
above the int64 range, and a key `<k>/shape` next to a key `<k>` cannot be stored.

>>> record = decode_example_record(encode_example_record({"x": np.eye(2), "y": 3}), None)
>>> record["x"].shape, record["y"]
((2, 2), 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tpufeed.errors import CodecError, InvalidArgumentError
from tpufeed.transforms.example import encode_example, parse_example

__all__ = ["SHAPE_SUFFIX", "check_example_record", "decode_example_record", "encode_example_record"]

SHAPE_SUFFIX = "/shape"
_INT64_MAX = np.iinfo(np.int64).max


def check_example_record(record: dict[str, Any], where: str) -> None:
    """Raises InvalidArgumentError naming `where` and the key if `record` cannot be stored as a
    `tf.train.Example` by `encode_example_record`."""
    for key, value in record.items():

        def refuse(why: str, key: str = key) -> InvalidArgumentError:
            return InvalidArgumentError(
                f"{where}: key {key!r} {why}; --record-format "
                "tf_example stores ints, floats, bytes, str and numeric "
                "numpy arrays"
            )

        if not isinstance(key, str):
            raise refuse("is not a str")
        if key.endswith(SHAPE_SUFFIX) and key[: -len(SHAPE_SUFFIX)] in record:
            raise refuse(f"clashes with the shape feature of key {key[: -len(SHAPE_SUFFIX)]!r}")
        if isinstance(value, (np.ndarray, np.generic)):
            kind = np.asarray(value).dtype.kind
            if kind not in "biuf":
                raise refuse(
                    f"is an array of dtype {np.asarray(value).dtype}, which a "
                    "tf.train.Example cannot hold"
                )
            if kind == "u" and np.asarray(value).size and np.asarray(value).max() > _INT64_MAX:
                raise refuse("holds values above the int64 range (tf.train.Example's int64_list)")
        elif not isinstance(value, (bool, int, float, bytes, str)):
            raise refuse(f"is {type(value).__name__}, which a tf.train.Example cannot hold")


def encode_example_record(record: dict[str, Any]) -> bytes:
    """A serialized `tf.train.Example` of `record` (checked by `check_example_record`)."""
    features: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, (np.ndarray, np.generic)):
            array = np.asarray(value)
            features[key] = array.reshape(-1).astype(
                np.int64 if array.dtype.kind in "biu" else np.float32
            )
            features[key + SHAPE_SUFFIX] = np.asarray(array.shape, np.int64)
        else:
            features[key] = value
    return encode_example(features)


def decode_example_record(data: bytes, schema: dict[str, Any] | None) -> dict[str, Any]:
    """The dict that `encode_example_record` stored in `data`; `schema` (a manifest's) gives
    back dtypes, str and bool. Raises CodecError saying what is wrong with the bytes."""
    try:
        parsed = parse_example(data)
    except ValueError as e:
        raise CodecError(f"not a tf.train.Example: {e}") from e
    out: dict[str, Any] = {}
    for key, value in parsed.items():
        if key.endswith(SHAPE_SUFFIX) and key[: -len(SHAPE_SUFFIX)] in parsed:
            continue
        spec = (schema or {}).get(key) or {}
        shape = parsed.get(key + SHAPE_SUFFIX)
        if shape is not None:
            out[key] = _array(key, value, shape, spec)
        elif isinstance(value, bytes):
            out[key] = _text(key, value) if spec.get("type") == "str" else value
        elif isinstance(value, np.ndarray) and value.size == 1:
            item = value[0]
            out[key] = (
                bool(item)
                if spec.get("type") == "bool"
                else float(item)
                if value.dtype.kind == "f"
                else int(item)
            )
        else:
            count = len(value) if isinstance(value, list) else value.size
            raise CodecError(
                f"feature {key!r} holds {count} values and has no "
                f"{key + SHAPE_SUFFIX!r} feature: not a record tpufeed wrote"
            )
    return out


def _array(key: str, value: Any, shape: Any, spec: dict[str, Any]) -> np.ndarray:
    if (
        not isinstance(value, np.ndarray)
        or not isinstance(shape, np.ndarray)
        or shape.dtype != np.int64
        or (shape < 0).any()
    ):
        raise CodecError(
            f"feature {key!r} and its shape {key + SHAPE_SUFFIX!r} are not a "
            "numeric list and a list of sizes"
        )
    try:
        array = value.reshape(tuple(int(n) for n in shape))
    except ValueError:
        raise CodecError(
            f"feature {key!r} holds {value.size} values, which do not fit its "
            f"shape {shape.tolist()}"
        ) from None
    if spec.get("type") == "ndarray":
        return array.astype(spec["dtype"])
    return array


def _text(key: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CodecError(f"feature {key!r} is not UTF-8 text: {e}") from e
