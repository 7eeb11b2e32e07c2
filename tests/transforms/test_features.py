"""Select / Rename / Cast: behaviour, errors naming the key, and use in Dataset.map."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms import Cast, Rename, Select


def test_select_keeps_keys_in_order():
    assert list(Select(["b", "a"])({"a": 1, "b": 2, "c": 3})) == ["b", "a"]
    assert Select(["a", "z"], missing_ok=True)({"a": 1}) == {"a": 1}
    with pytest.raises(KeyError, match=r"'z' is missing \(the element has \['a'\]\)"):
        Select(["z"])({"a": 1})
    with pytest.raises(InvalidArgumentError, match="list of str"):
        Select("abc")


def test_rename_and_clashes():
    assert Rename({"a": "x"})({"a": 1, "b": 2}) == {"x": 1, "b": 2}
    assert Rename({"a": "b", "b": "a"})({"a": 1, "b": 2}) == {"b": 1, "a": 2}
    with pytest.raises(ValueError, match="clashes"):
        Rename({"a": "b"})({"a": 1, "b": 2})
    with pytest.raises(KeyError, match="'q' is missing"):
        Rename({"q": "r"})({"a": 1})
    with pytest.raises(InvalidArgumentError, match="two keys to one name"):
        Rename({"a": "c", "b": "c"})


def test_cast_parses_strings_and_converts_arrays():
    out = Cast({"i": "int64", "f": np.float32, "b": "bool", "arr": "float16"})(
        {"i": "42", "f": b"2.5", "b": "Yes", "arr": [1, 2], "other": "kept"}
    )
    assert out["i"].dtype == np.int64 and int(out["i"]) == 42
    assert out["f"].dtype == np.float32 and float(out["f"]) == 2.5
    assert bool(out["b"]) is True and out["arr"].dtype == np.float16 and out["other"] == "kept"
    with pytest.raises(ValueError, match=r"key 'i': cannot cast '4\.5' to int64"):
        Cast({"i": "int64"})({"i": "4.5"})
    with pytest.raises(ValueError, match="key 'b'"):
        Cast({"b": "bool"})({"b": "maybe"})
    with pytest.raises(InvalidArgumentError, match="numeric"):
        Cast({"s": "U5"})


def test_transforms_pickle_for_worker_processes():
    for fn in (Select(["a"]), Rename({"a": "b"}), Cast({"a": "int32"})):
        assert pickle.loads(pickle.dumps(fn))({"a": "1"}) == fn({"a": "1"})


def test_feature_transforms_in_a_dataset():
    rows = [{"label": str(i), "text": f"t{i}", "junk": 0} for i in range(6)]
    ds = (
        tpufeed.Dataset.from_sequence(rows)
        .map(Select(["label", "text"]))
        .map(Rename({"label": "y"}))
        .map(Cast({"y": "int32"}))
        .batch(3)
    )
    first = next(iter(ds))
    assert first["y"].tolist() == [0, 1, 2] and first["y"].dtype == np.int32
    assert set(first) == {"y", "text"}


def test_errors_in_a_dataset_name_the_record():
    ds = tpufeed.Dataset.from_sequence([{"y": "1"}, {"y": "x"}]).map(Cast({"y": "int64"}))
    with pytest.raises(tpufeed.TransformError, match=r"key 'y': cannot cast 'x'.*record 1"):
        list(ds)
