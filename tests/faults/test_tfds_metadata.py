"""The fault suite over a TFDS-prepared dataset's metadata, the one file kind from_tfds adds
(its shards are ArrayRecord and TFRecord files, which the suite runs over as formats):
`dataset_info.json` and `features.json` damaged one place at a time open and read to the
records TFDS itself reads from them (`tfds.data_source`), or the dataset's own, or raise a
named `TpufeedError`, never another exception; in place of
either, a FIFO, a folder, a link out of the data folder, or a file past the bound is refused by
name without blocking."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tpufeed
from tests.faults.budget import examples
from tests.faults.json_mutations import mutated
from tpufeed.errors import TpufeedError

builders = pytest.importorskip("tests.sources.tfds_builders")
FOLDER = "tpufeed_tiny/1.0.0"
SPLIT = "train[:60%]+test"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """(data_dir, the version folder, what the undamaged dataset reads)."""
    data_dir = tmp_path_factory.mktemp("tfds-faults")
    builders.prepare(builders.TpufeedTiny, data_dir, "array_record")
    return data_dir, data_dir / FOLDER, read(data_dir)


def plain(value):
    """An element as plain values, to compare tpufeed's (numpy scalars) with TFDS's (Python
    numbers where a feature is a scalar)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (bytes, str)):
        return value
    return np.asarray(value).tolist()


def read(data_dir) -> list:
    return [plain(e) for e in tpufeed.Dataset.from_tfds("tpufeed_tiny", SPLIT, data_dir=data_dir)]


def tfds_read(data_dir) -> list[str] | None:
    """What TFDS's own data source reads from the folder's metadata (not from the builder's
    code, which this process has), None if it refuses or fails."""
    try:
        builder = builders.tfds.builder_from_directory(str(data_dir / FOLDER))
        source = builder.as_data_source(split=SPLIT)
        return [plain(source[i]) for i in range(len(source))]
    except Exception:  # noqa: BLE001 - any refusal of TFDS's
        return None


def damaged_read(prepared, name: str, damaged: dict) -> tuple[list | None, list | None]:
    """(what tpufeed reads with `name` replaced by `damaged`, None for a named error; what
    TFDS reads, None where it fails)."""
    data_dir, folder, _ = prepared
    path = folder / name
    original = path.read_bytes()
    path.write_text(json.dumps(damaged, allow_nan=True))
    try:
        return read(data_dir), tfds_read(data_dir)
    except TpufeedError as error:
        assert str(error)
        return None, None
    finally:
        path.write_bytes(original)


@examples(40)
@given(data=st.data())
def test_a_damaged_dataset_info_reads_right_or_raises_a_named_error(prepared, data):
    info = json.loads((prepared[1] / "dataset_info.json").read_text())
    damaged = data.draw(mutated(info), label="info")
    records, by_tfds = damaged_read(prepared, "dataset_info.json", damaged)
    assert records is None or records in (by_tfds, prepared[2])


@examples(40)
@given(data=st.data())
def test_a_damaged_features_json_decodes_or_raises_a_named_error(prepared, data):
    """features.json says how records decode: damaged, it may decode them otherwise, but only
    as TFDS does, or it is refused by name."""
    features = json.loads((prepared[1] / "features.json").read_text())
    damaged = data.draw(mutated(features), label="features")
    records, by_tfds = damaged_read(prepared, "features.json", damaged)
    assert records is None or records in (by_tfds, prepared[2])


EXPECTED = {
    "fifo": "is a FIFO",
    "folder": "not a regular file|is a directory",
    "link out": "outside",
    "too large": "larger than 67,108,864 bytes",
}


@pytest.mark.parametrize("name", ["dataset_info.json", "features.json"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "link out", "too large"])
def test_a_metadata_file_that_is_not_a_small_regular_file_inside_is_refused(
    prepared, tmp_path, name, kind
):
    data_dir = tmp_path / "data"
    shutil.copytree(prepared[0], data_dir)
    path = data_dir / FOLDER / name
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "link out":
        outside = tmp_path / name
        shutil.copy(prepared[1] / name, outside)
        os.symlink(outside, path)
    else:
        with open(path, "wb") as f:
            f.truncate((64 << 20) + 1)
    with pytest.raises(TpufeedError, match=EXPECTED[kind]) as raised:
        read(data_dir)
    assert name in str(raised.value)
