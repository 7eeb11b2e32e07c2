"""`cache()` over sources without files: a Hugging Face dataset (its data, its Arrow files, its
transform) and a user's own source are keyed by what they hold, or refused; never replayed for
other data."""

from __future__ import annotations

import os
import shutil
import threading

import datasets
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError


def _values(ds: tpufeed.Dataset) -> list[int]:
    return [int(element["x"]) for element in ds]


def _cached(hf, directory) -> tpufeed.Dataset:
    return tpufeed.Dataset.from_huggingface(hf).map(dict).cache(str(directory), 1 << 20)


def test_an_in_memory_dataset_with_other_data_makes_new_entries(tmp_path):
    assert _values(_cached(datasets.Dataset.from_dict({"x": [1, 2, 3]}), tmp_path)) == [1, 2, 3]
    assert _values(_cached(datasets.Dataset.from_dict({"x": [4, 5, 6]}), tmp_path)) == [4, 5, 6]


def test_an_edited_transform_makes_new_entries(tmp_path):
    hf = datasets.Dataset.from_dict({"x": [1, 2, 3]})
    double = hf.with_transform(lambda batch: {"x": [v * 2 for v in batch["x"]]})
    triple = hf.with_transform(lambda batch: {"x": [v * 3 for v in batch["x"]]})
    assert _values(_cached(double, tmp_path)) == [2, 4, 6]
    assert _values(_cached(triple, tmp_path)) == [3, 6, 9]


def test_arrow_files_replaced_at_the_same_size_and_time_make_new_entries(tmp_path):
    """A dataset saved to disk is read memory-mapped: what pickles is its files' paths, so the
    files' whole identity keys it (a new inode is other data, whatever its size and time)."""
    datasets.Dataset.from_dict({"x": [1, 2, 3]}).save_to_disk(str(tmp_path / "a"))
    datasets.Dataset.from_dict({"x": [7, 8, 9]}).save_to_disk(str(tmp_path / "b"))
    loaded = datasets.load_from_disk(str(tmp_path / "a"))
    assert _values(_cached(loaded, tmp_path / "cache")) == [1, 2, 3]
    (first,) = [entry["filename"] for entry in loaded.cache_files]
    (other,) = [
        entry["filename"] for entry in datasets.load_from_disk(str(tmp_path / "b")).cache_files
    ]
    assert os.path.getsize(first) == os.path.getsize(other)
    st = os.stat(first)
    shutil.copyfile(other, first + ".new")
    os.utime(first + ".new", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(first + ".new", first)
    reloaded = datasets.load_from_disk(str(tmp_path / "a"))
    assert _values(_cached(reloaded, tmp_path / "cache")) == [7, 8, 9]


class Locked:
    """A user's source holding something that does not pickle (a lock)."""

    def __init__(self, values: list[int], identity: bool = False):
        self.values, self.lock = values, threading.Lock()
        if identity:
            self.content_identity = lambda: repr(self.values).encode()

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: int) -> dict:
        return {"x": self.values[index]}


def test_a_source_that_cannot_be_keyed_is_refused_naming_the_ways_out(tmp_path):
    ds = tpufeed.Dataset.from_source(Locked([1, 2, 3])).map(dict)
    with pytest.raises(InvalidArgumentError) as caught:
        ds.cache(str(tmp_path), 1 << 20)
    message = str(caught.value)
    assert "cannot tell when the data of Locked changes" in message
    assert "content_identity()" in message and "key=" in message


def test_a_source_keyed_by_its_own_identity_or_by_the_users_key_is_cached(tmp_path):
    a, b = Locked([1, 2, 3], identity=True), Locked([4, 5, 6], identity=True)
    for source, want in ((a, [1, 2, 3]), (b, [4, 5, 6])):
        ds = tpufeed.Dataset.from_source(source).map(dict).cache(str(tmp_path / "own"), 1 << 20)
        assert _values(ds) == want
    for key, source, want in (
        ("v1", Locked([1, 2, 3]), [1, 2, 3]),
        ("v2", Locked([4, 5, 6]), [4, 5, 6]),
    ):
        ds = (
            tpufeed.Dataset.from_source(source)
            .map(dict)
            .cache(str(tmp_path / "k"), 1 << 20, key=key)
        )
        assert _values(ds) == want
