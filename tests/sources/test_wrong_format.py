"""A file given to the constructor of another format is refused when it is opened, naming what
opens it (issue 47: `Dataset.open` on a JSONL file read it as a manifest and called it invalid
JSON; `from_tfrecord` on a non-TFRecord file counted one record and failed at the first read)."""

from __future__ import annotations

import json

import pytest

import tpufeed
from tpufeed.errors import CorruptDataError, InvalidArgumentError
from tpufeed.sources.tfrecord import write_tfrecords


@pytest.mark.parametrize(
    "name, does",
    [
        ("rows.jsonl", "build a dataset of it first: tpufeed build --input {path} --output DIR"),
        ("rows.csv", "build a dataset of it first: tpufeed build --input {path} --output DIR"),
        ("train.tfrecord", "open it with Dataset.from_tfrecord({path!r})"),
        ("train-00000-of-00002.array_record", "open it with Dataset.from_array_record({path!r})"),
        ("train.parquet", "open it with Dataset.from_parquet({path!r})"),
        ("shard-000.tar", "open it with Dataset.from_webdataset({path!r})"),
    ],
)
def test_open_refuses_a_data_file_naming_what_opens_it(tmp_path, name, does):
    path = tmp_path / name
    path.write_text(json.dumps({"a": 1}) + "\n" + json.dumps({"a": 2}) + "\n")
    with pytest.raises(InvalidArgumentError) as refused:
        tpufeed.Dataset.open(str(path))
    message = str(refused.value)
    assert message.startswith(f"{path} is a data file, not a dataset folder or its manifest.json")
    assert message.endswith(does.format(path=str(path)))


@pytest.mark.parametrize(
    "text", [b'{"a": 1, "b": [1.5]}\n{"a": 2}\n', b"a,b\n1,2\n3,4\n", b"x" * 100]
)
def test_from_tfrecord_refuses_a_file_that_holds_no_record_when_opened(tmp_path, text):
    path = tmp_path / "data.tfrecord"
    path.write_bytes(text)
    with pytest.raises(CorruptDataError) as refused:
        tpufeed.Dataset.from_tfrecord(str(path))
    message = str(refused.value)
    assert message.startswith(f"{path}: record 0 at byte offset 0: ")
    assert (
        f"not a TFRecord file, or its first header is damaged (it starts with {text[:16]!r})"
        in message
    )


def test_a_tfrecord_damaged_after_its_first_record_still_opens(tmp_path):
    """Only a first header that does not frame refuses the file; later damage is a bad record
    where it lies (tests/sources/test_tfrecord.py), which ignore_errors can skip."""
    path = tmp_path / "data.tfrecord"
    write_tfrecords(str(path), [b"one", b"two"])
    with open(path, "ab") as f:
        f.write(b"not a record header at all")
    ds = tpufeed.Dataset.from_tfrecord(str(path)).ignore_errors(1)
    assert list(ds) == [b"one", b"two"]
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert list(tpufeed.Dataset.from_tfrecord(str(empty))) == []
