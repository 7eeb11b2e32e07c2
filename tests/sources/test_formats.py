"""The format registry: every file format's reader, writer, extensions and counting in one
place, and every site that tells formats apart (inspect, bench, the build's inputs, the
manifest, the CLI) giving the registry's answer."""

from __future__ import annotations

import argparse
import inspect as python_inspect
import json
import pickle

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import CorruptDataError, InvalidArgumentError
from tpufeed.sources.built.fields import check_manifest
from tpufeed.sources.built.manifest import is_dataset_path
from tpufeed.sources.formats import (
    FORMATS,
    format_for_path,
    get_format,
    guess_format,
    writable_formats,
)

RECORDS = [b"", b"a", b"bc" * 100, bytes(range(256))]


@pytest.mark.parametrize(
    "name, path",
    [
        ("array_record", "d/train.array_record"),
        ("array_record", "d/x.ar"),
        ("array_record", "train.array_record-00003-of-00016"),
        ("array_record", "X.AR"),
        ("tfrecord", "d/train.tfrecord"),
        ("tfrecord", "x.tfr"),
        ("tfrecord", "x.tfrecords"),
        ("tfrecord", "gs://b/train.tfrecord-00000-of-00002"),
        ("parquet", "d/train.parquet"),
        ("parquet", "gs://b/X.PARQUET"),
    ],
)
def test_names_tell_the_format(name, path):
    assert format_for_path(path) is FORMATS[name]
    assert guess_format(path).name == name


@pytest.mark.parametrize(
    "path",
    [
        "x.parquet.crc",
        "x.arx",
        "x.tfrecord.tpufeed-index",
        "a-train.tfrecord-00000-of-00002.tpufeed-index",
        "x.json",
    ],
)
def test_other_names_belong_to_no_format(path):
    assert format_for_path(path) is None
    with pytest.raises(
        InvalidArgumentError,
        match=rf"cannot tell the format of {path}.*\.tfr "
        r"\(tfrecord\).*pass --format",
    ):
        guess_format(path)


def test_unknown_format_names_are_refused_with_the_choices():
    with pytest.raises(
        InvalidArgumentError,
        match=r"--format must be one of \['array_record', "
        r"'parquet', 'tfrecord'\], got 'csv'",
    ):
        get_format("csv", "--format")


@pytest.mark.parametrize("fmt", writable_formats())
def test_every_writable_format_writes_counts_and_reads_back(tmp_path, fmt):
    """The conformance run of each registered format's writer and readers."""
    fmt = FORMATS[fmt]
    path = str(tmp_path / f"f{fmt.extension}")
    assert fmt.write(path, iter(RECORDS), "group_size:1") == len(RECORDS)
    assert fmt.count_records(path) == len(RECORDS)
    opened = fmt.open_file(path)
    try:
        assert opened.read(np.array([3, 0, 2])) == [RECORDS[3], RECORDS[0], RECORDS[2]]
    finally:
        opened.close()
    source = fmt.open_source([path, path])
    assert len(source) == 2 * len(RECORDS) and source[5] == RECORDS[1]
    dataset = getattr(tpufeed.Dataset, fmt.constructor)(path)
    assert list(dataset) == RECORDS
    assert pickle.loads(pickle.dumps(fmt)) is fmt


def test_counts_a_manifest_promises_must_fit_the_file():
    assert FORMATS["tfrecord"].count_problem(2, 31) is not None
    assert FORMATS["tfrecord"].count_problem(2, 32) is None
    assert FORMATS["tfrecord"].count_problem(0, 0) is None
    assert FORMATS["array_record"].count_problem(10**6, 1) is None  # its count is in its footer


def test_the_manifest_check_takes_formats_from_the_registry():
    manifest = {
        "format": "tpufeed-dataset",
        "format_version": 1,
        "file_format": "tfrecord",
        "record_format": "bytes",
        "num_records": 3,
        "shards": [{"path": "a.tfrecord", "num_records": 3, "num_bytes": 40, "crc32c": "00000000"}],
    }
    with pytest.raises(
        CorruptDataError,
        match=r"shards\[0\].num_records is 3: a TFRecord file "
        "of 40 bytes cannot hold 3 records",
    ):
        check_manifest(manifest, "m.json")
    manifest["file_format"] = "parquet"
    with pytest.raises(
        CorruptDataError,
        match=r"'file_format' is 'parquet', expected one of "
        r"\['array_record', 'tfrecord'\]",
    ):
        check_manifest(manifest, "m.json")
    manifest.update(file_format="array_record", record_format="pickle")
    with pytest.raises(
        CorruptDataError,
        match="'record_format' is 'pickle', expected one of "
        r"\['bytes', 'tf.train.Example', 'tpufeed.codec'\]",
    ):
        check_manifest(manifest, "m.json")


def test_a_gs_url_of_any_registered_extension_is_a_file_not_a_dataset():
    assert not is_dataset_path("gs://b/x.tfr")  # was taken for a dataset folder
    assert not is_dataset_path("gs://b/x.ar")
    assert not is_dataset_path("gs://b/x.parquet")
    assert is_dataset_path("gs://b/datasets/train")


@pytest.mark.parametrize(
    "name, fmt",
    [("data.tfr", "tfrecord"), ("data.ar", "array_record"), ("data.tfrecords", "tfrecord")],
)
def test_inspect_and_bench_agree_on_the_format(tmp_path, name, fmt):
    """Before the registry, bench read every name without `.tfrecord` as ArrayRecord."""
    from tpufeed.cli.bench import make_target
    from tpufeed.cli.inspection import inspect_paths, open_source

    path = str(tmp_path / name)
    FORMATS[fmt].write(path, RECORDS[:3], None)
    assert type(open_source([path], None)) is type(FORMATS[fmt].open_source(path))
    lines, failures = inspect_paths([path], verify=True)
    assert not failures and lines[0].startswith("1 file, 3 records")
    ds = make_target(argparse.Namespace(target=path, transform=[], batch_size=2))
    assert type(ds.source) is type(FORMATS[fmt].open_source(path))
    assert sorted(ds.source[i] for i in range(len(ds.source))) == sorted(RECORDS[:3])


def test_parquet_is_read_not_written_and_inspect_and_bench_read_its_rows(tmp_path, capsys):
    """Parquet rows are dicts: inspect shows them like decoded records; bench batches them."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tpufeed.cli import main
    from tpufeed.cli.bench import make_target
    from tpufeed.cli.inspection import inspect_paths

    path = str(tmp_path / "rows.parquet")
    pq.write_table(
        pa.table(
            {"id": list(range(10)), "text": [f"t{i}" for i in range(10)], "v": [[1.0, 2.0]] * 10}
        ),
        path,
        row_group_size=3,
    )
    assert "parquet" not in writable_formats()
    with pytest.raises(InvalidArgumentError, match="reads Parquet files but does not write"):
        FORMATS["parquet"].write(str(tmp_path / "out.parquet"), [b"x"])
    lines, failures = inspect_paths([path], verify=True)
    assert not failures and lines[0].splitlines()[:3] == [
        "1 file, 10 records",
        f"  {path}: 10 records",
        "record 0: 3 fields",
    ]
    assert "  text: str = 't0'" in lines[0] and "  v: float64[2]" in lines[0]
    assert FORMATS["parquet"].count_records(path) == 10
    ds = make_target(argparse.Namespace(target=path, transform=[], batch_size=4))
    assert type(ds.source) is type(FORMATS["parquet"].open_source(path))
    assert sorted(int(ds.source[i]["id"]) for i in range(10)) == list(range(10))
    assert main(["bench", path, "--batches", "2", "--batch-size", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["records"] == 8


def test_a_plain_folder_of_short_names_is_recognised(tmp_path):
    from tpufeed.cli.inspection import folder_shards

    for i in range(2):
        FORMATS["tfrecord"].write(str(tmp_path / f"p{i}.tfr"), [b"x"])
    assert folder_shards(str(tmp_path)) == (
        "tfrecord",
        [str(tmp_path / "p0.tfr"), str(tmp_path / "p1.tfr")],
    )
    FORMATS["array_record"].write(str(tmp_path / "q.ar"), [b"y"], None)
    with pytest.raises(
        InvalidArgumentError,
        match=r"holds ArrayRecord and TFRecord files .*"
        r"\*\.array_record",
    ):
        folder_shards(str(tmp_path))


def test_the_build_reads_inputs_by_the_registry_extensions(tmp_path):
    from tpufeed.beam.read.inputs import expand_inputs

    FORMATS["tfrecord"].write(str(tmp_path / "a.tfr"), [b"x"])
    FORMATS["array_record"].write(str(tmp_path / "b.ar"), [b"y"], None)
    kinds = {f.path.rsplit("/", 1)[-1]: f.kind for f in expand_inputs([str(tmp_path / "*")])}
    assert kinds == {"a.tfr": "tfrecord", "b.ar": "array_record"}


def test_tfrecord_framing_lives_in_one_module(tmp_path):
    """The build reads TFRecord inputs with tfrecord_format's checks, not a copy of them."""
    from tpufeed.beam.read import inputs
    from tpufeed.transforms.example import encode_example

    assert "masked_crc" not in python_inspect.getsource(inputs)
    path = tmp_path / "in.tfrecord"
    FORMATS["tfrecord"].write(str(path), [encode_example({"a": 1}), encode_example({"a": 2})])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the second record's data CRC
    path.write_bytes(bytes(data))
    records = inputs.read_input(inputs.InputFile(str(path), "tfrecord"))
    assert next(records)[2]["a"].tolist() == [1]
    with pytest.raises(
        CorruptDataError,
        match=r"in.tfrecord: record 1 at byte offset \d+: data "
        "CRC mismatch",
    ):
        next(records)


def test_cli_choices_come_from_the_registry():
    from tpufeed.cli.program import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices

    def choices(command, option):
        return next(a.choices for a in commands[command]._actions if option in a.option_strings)

    # inspect and bench read every registry format, and WebDataset, MDS, JSONL and CSV too
    # (tests/cli/test_inputs.py).
    read = sorted([*FORMATS, "csv", "jsonl", "mds", "webdataset"])
    assert choices("inspect", "--format") == read
    assert choices("bench", "--format") == read
    assert choices("build", "--format") == writable_formats()
    assert choices("build", "--record-format") == ["codec", "tf_example"]
