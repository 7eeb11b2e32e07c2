"""`tpufeed build` end to end on the in-process runner: inputs, transforms, failures, readers."""

from __future__ import annotations

import csv
import io
import json
import os
import re

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tpufeed import cli
from tpufeed.beam import BuildConfig, build
from tpufeed.errors import (
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
    TransformError,
)
from tpufeed.sources.array_record import write_array_records
from tpufeed.sources.tfrecord import write_tfrecords
from tpufeed.transforms import encode_example


def _json_records(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "id": i,
            "score": i / 7,
            "name": f"ré{i}",
            "ok": i % 2 == 0,
            "tokens": list(range(1, 1 + (i % 6))) or [0],
            "grid": [[i, 1], [2, 3]],
        }
        for i in range(start, start + n)
    ]


def write_jsonl(path, records: list, blank_lines: bool = False) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
            if blank_lines:
                f.write("\n")
    return str(path)


def run_cli(*args: str, capsys=None) -> tuple[int, str, str]:
    code = cli.main(["build", "-q", *map(str, args)])
    out, err = capsys.readouterr() if capsys else ("", "")
    return code, out, err


def _all(root) -> list:
    source = tpufeed.Dataset.open(root, verify=True).source
    return source.__getitems__(range(len(source)))


def _tree(root) -> dict[str, bytes]:
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


def test_jsonl_build_open_gives_identical_records(tmp_path, capsys):
    originals = _json_records(25) + _json_records(12, start=100)
    write_jsonl(tmp_path / "a.jsonl", originals[:25], blank_lines=True)
    write_jsonl(tmp_path / "b.jsonl", originals[25:])
    code, out, _ = run_cli(
        "--input",
        tmp_path / "*.jsonl",
        "--output",
        tmp_path / "ds",
        "--num-shards",
        "3",
        capsys=capsys,
    )
    assert code == 0
    assert "records in     37" in out and "records out    37" in out and "shards         3" in out
    got = _all(tmp_path / "ds")
    assert len(got) == len(originals)
    for record, original in zip(got, originals):  # input order is kept
        assert record.keys() == original.keys()
        for key, value in original.items():
            if isinstance(value, list):
                np.testing.assert_array_equal(record[key], np.array(value))
                assert record[key].dtype == np.int64
            else:
                assert record[key] == value and type(record[key]) is type(value)
    schema = tpufeed.Dataset.open(tmp_path / "ds").schema
    assert schema["grid"]["shape"] == [2, 2] and schema["tokens"]["ragged_dims"] == [0]


def test_two_builds_are_byte_identical(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", _json_records(40))
    build(
        BuildConfig(
            inputs=(str(tmp_path / "in.jsonl"),), output=str(tmp_path / "one"), num_shards=3
        )
    )
    build(
        BuildConfig(
            inputs=(str(tmp_path / "in.jsonl"),),
            output=str(tmp_path / "two"),
            num_shards=3,
            beam_args=("--direct_running_mode=in_memory", "--direct_num_workers=1"),
        )
    )  # passed to Beam
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    assert len(one) == 4 and one == two


def test_more_shards_than_records_is_refused_with_the_record_count(tmp_path):
    """Before any shard is written: 8 shards of 5 records would leave 3 empty files."""
    path = write_jsonl(tmp_path / "in.jsonl", _json_records(5))
    with pytest.raises(
        InvalidArgumentError,
        match=r"--num-shards 8 is more than the 5 records this build made \(after --transform "
        r"and skips\): 3 shards would be empty. Pass --num-shards 5 or fewer",
    ):
        build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), num_shards=8))
    assert not os.path.exists(tmp_path / "ds") or os.listdir(tmp_path / "ds") == []
    assert [n for n in os.listdir(tmp_path) if ".tpufeed-build-" in n] == []
    summary = build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), num_shards=5))
    assert summary["shards"] == 5 and summary["records_out"] == 5


def test_a_transform_that_raises_leaves_nothing_that_opens(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", _json_records(30))
    (tmp_path / "t.py").write_text(
        "def fail_on_17(r):\n    if r['id'] == 17:\n        raise RuntimeError('no 17')\n"
        "    return r\n"
    )
    with pytest.raises(
        TransformError,
        match=r"in\.jsonl line 18: --transform .*t\.py:fail_on_17 "
        r"raised RuntimeError: no 17",
    ) as info:
        build(
            BuildConfig(
                inputs=(str(tmp_path / "in.jsonl"),),
                output=str(tmp_path / "ds"),
                num_shards=2,
                transforms=(f"{tmp_path}/t.py:fail_on_17",),
            )
        )
    assert "Traceback" in str(info.value)
    with pytest.raises(SourceNotFoundError):
        tpufeed.Dataset.open(tmp_path / "ds")
    assert not os.path.exists(tmp_path / "ds") or os.listdir(tmp_path / "ds") == []


def test_a_bad_json_line_is_named_or_counted(tmp_path, capsys):
    lines = [json.dumps(r) for r in _json_records(6)]
    lines[3] = '{"id": 3, "score": '
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    with pytest.raises(SourceError, match=r"in\.jsonl line 4: invalid JSON"):
        build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds")))
    code, out, err = run_cli(
        "--input", path, "--output", tmp_path / "ds", "--max-bad", "1", capsys=capsys
    )
    assert code == 0 and "skipped        1" in out and "records out    5" in out
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["build"]["skipped"] == 1
    assert "in.jsonl line 4: invalid JSON" in manifest["build"]["skipped_examples"][0]


def test_more_bad_records_than_allowed_fails_with_the_list(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", ["[1]", "{}", "nope", '{"a": null}'])
    code, _, err = run_cli(
        "--input", path, "--output", tmp_path / "ds", "--max-bad", "2", capsys=capsys
    )
    assert code == 2
    assert "3 bad records, more than --max-bad 2" in err
    assert "line 1: expected a JSON object, got list" in err and "line 3: invalid JSON" in err
    assert "line 4: key 'a' is null" in err
    assert not os.path.exists(tmp_path / "ds" / "manifest.json")


def test_csv_missing_column_and_a_cast_transform(tmp_path):
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows([["a, b", "1"], ["c", "2"], ["only-text"], ["d", "4"]])
    (tmp_path / "t.py").write_text(
        "from tpufeed.transforms import Cast\ncast = Cast({'label': 'int32'})\n"
    )
    config = dict(
        inputs=(str(path),), output=str(tmp_path / "ds"), transforms=(f"{tmp_path}/t.py:cast",)
    )
    with pytest.raises(
        SourceError,
        match=r"in\.csv line 4: row has 1 fields, the header has 2 "
        r"\(missing column 'label'\)",
    ):
        build(BuildConfig(**config))
    summary = build(BuildConfig(**config, max_bad=1))
    assert summary["skipped"] == 1 and summary["records_out"] == 3
    got = _all(tmp_path / "ds")
    assert [r["text"] for r in got] == ["a, b", "c", "d"]
    assert [int(r["label"]) for r in got] == [1, 2, 4] and got[0]["label"].dtype == np.int32


def _png(color: int, size=(6, 8)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((*size, 3), color, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_image_folder_with_classes_decode_transform_and_a_bad_image(tmp_path, capsys):
    pytest.importorskip("PIL")
    for cls, colors in (("cat", (10, 20)), ("dog", (30,))):
        os.makedirs(tmp_path / "img" / cls)
        for i, c in enumerate(colors):
            (tmp_path / "img" / cls / f"{i}.png").write_bytes(_png(c))
    (tmp_path / "img" / "dog" / "broken.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "t.py").write_text(
        "from tpufeed.transforms import DecodeImage, Resize\n"
        "def prep(r):\n    return Resize((4, 4))(DecodeImage()(r))\n"
    )
    config = dict(
        inputs=(str(tmp_path / "img"),),
        output=str(tmp_path / "ds"),
        transforms=(f"{tmp_path}/t.py:prep",),
    )
    with pytest.raises(SourceError, match=r"img/dog/broken\.png: cannot decode image"):
        build(BuildConfig(**config))
    assert build(BuildConfig(**config, max_bad=1))["skipped"] == 1
    got = _all(tmp_path / "ds")
    assert [(r["class_name"], r["label"], r["path"]) for r in got] == [
        ("cat", 0, "cat/0.png"),
        ("cat", 0, "cat/1.png"),
        ("dog", 1, "dog/0.png"),
    ]
    assert got[2]["image"].shape == (4, 4, 3) and (got[2]["image"] == 30).all()
    # The label-to-class list, in the manifest and as inspect shows it.
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["build"]["classes"] == ["cat", "dog"]
    assert cli.main(["inspect", str(tmp_path / "ds")]) == 0
    assert "  classes (label i is the i-th): cat, dog" in capsys.readouterr().out.splitlines()


def test_tfrecord_examples_and_array_record_inputs(tmp_path):
    examples = [
        encode_example({"label": i, "feat": np.arange(3, dtype=np.float32) * i, "text": f"ex{i}"})
        for i in range(7)
    ]
    write_tfrecords(
        tmp_path / "in.tfrecord", examples[:5] + [b"\xff not an example"] + examples[5:]
    )
    write_array_records(tmp_path / "raw.array_record", [b"raw-%d" % i for i in range(3)])
    summary = build(
        BuildConfig(
            inputs=(str(tmp_path / "in.tfrecord"),),
            output=str(tmp_path / "ex"),
            num_shards=2,
            max_bad=1,
        )
    )
    assert summary["records_in"] == 8 and summary["skipped"] == 1
    got = _all(tmp_path / "ex")
    assert [int(r["label"][0]) for r in got] == list(range(7))
    np.testing.assert_array_equal(got[2]["feat"], np.array([0, 2, 4], np.float32))
    assert got[3]["text"] == b"ex3"
    # An ArrayRecord of tpufeed records re-shards as dicts; raw ArrayRecords stay bytes.
    build(
        BuildConfig(
            inputs=(str(tmp_path / "ex" / "*.array_record"),),
            output=str(tmp_path / "again"),
            num_shards=3,
        )
    )
    assert [int(r["label"][0]) for r in _all(tmp_path / "again")] == list(range(7))
    build(BuildConfig(inputs=(str(tmp_path / "raw.array_record"),), output=str(tmp_path / "raw")))
    assert _all(tmp_path / "raw") == [b"raw-0", b"raw-1", b"raw-2"]


def test_transforms_can_drop_expand_and_use_an_rng(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", _json_records(10))
    (tmp_path / "t.py").write_text(
        "def split(r):\n"
        "    if r['id'] % 5 == 0:\n        return None\n"
        "    return [{'id': r['id'], 'part': p} for p in range(2)]\n"
        "def noise(r, rng):\n    return {**r, 'noise': float(rng.random())}\n"
    )
    transforms = (f"{tmp_path}/t.py:split", f"{tmp_path}/t.py:noise")
    summary = build(
        BuildConfig(
            inputs=(str(tmp_path / "in.jsonl"),),
            output=str(tmp_path / "a"),
            transforms=transforms,
            num_shards=2,
        )
    )
    assert (summary["records_in"], summary["filtered"], summary["records_out"]) == (10, 2, 16)
    got = _all(tmp_path / "a")
    assert [(r["id"], r["part"]) for r in got] == [
        (i, p) for i in range(10) if i % 5 for p in range(2)
    ]
    build(
        BuildConfig(
            inputs=(str(tmp_path / "in.jsonl"),),
            output=str(tmp_path / "b"),
            transforms=transforms,
            num_shards=2,
        )
    )
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")  # the rng is deterministic too


def test_bad_arguments_fail_before_the_pipeline(tmp_path, capsys):
    write_jsonl(tmp_path / "in.jsonl", _json_records(2))
    code, _, err = run_cli(
        "--input", tmp_path / "nothing-*.jsonl", "--output", tmp_path / "o", capsys=capsys
    )
    assert code == 2 and "matches no file" in err
    code, _, err = run_cli(
        "--input",
        tmp_path / "in.jsonl",
        "--output",
        tmp_path / "o",
        "--transform",
        "no_such_module_xyz:f",
        capsys=capsys,
    )
    assert code == 2 and "cannot import no_such_module_xyz" in err
    with pytest.raises(SystemExit) as usage:  # argparse refuses it, as a usage error
        run_cli(
            "--input",
            tmp_path / "in.jsonl",
            "--output",
            tmp_path / "o",
            "--num-shards",
            "0",
            capsys=capsys,
        )
    assert usage.value.code == 2 and "--num-shards" in capsys.readouterr().err
    (tmp_path / "in.orc").write_bytes(b"")
    code, _, err = run_cli(
        "--input", tmp_path / "in.orc", "--output", tmp_path / "o", capsys=capsys
    )
    assert code == 2 and "in.orc: cannot tell the input format" in err and ".parquet" in err


def test_inspect_a_built_dataset(tmp_path, capsys):
    write_jsonl(tmp_path / "in.jsonl", _json_records(4))
    build(
        BuildConfig(inputs=(str(tmp_path / "in.jsonl"),), output=str(tmp_path / "ds"), num_shards=2)
    )
    assert cli.main(["inspect", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "4 records in 2 array_record shards" in out and "schema tokens" in out
    assert "record 0:" in out and "grid: int64[2, 2]" in out


@pytest.mark.slow
def test_array_record_output_reads_in_grain(tmp_path):
    grain = pytest.importorskip("grain.python")
    write_jsonl(tmp_path / "in.jsonl", _json_records(11))
    build(
        BuildConfig(inputs=(str(tmp_path / "in.jsonl"),), output=str(tmp_path / "ds"), num_shards=3)
    )
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    paths = [str(tmp_path / "ds" / s["path"]) for s in manifest["shards"]]
    source = grain.ArrayRecordDataSource(paths)
    assert len(source) == 11
    assert [tpufeed.codec.decode(source[i])["id"] for i in range(11)] == list(range(11))
    loader = grain.MapDataset.source(tpufeed.Dataset.open(tmp_path / "ds").source)
    assert [r["id"] for r in loader] == list(range(11))


@pytest.mark.slow
def test_tfrecord_output_reads_in_tf_data(tmp_path):
    tf = pytest.importorskip("tensorflow")
    write_jsonl(tmp_path / "in.jsonl", _json_records(9))
    (tmp_path / "t.py").write_text(
        "from tpufeed.transforms import encode_example\n"
        "def to_example(r):\n    return encode_example({'id': r['id'], 'tokens': r['tokens']})\n"
    )
    build(
        BuildConfig(
            inputs=(str(tmp_path / "in.jsonl"),),
            output=str(tmp_path / "ds"),
            num_shards=2,
            file_format="tfrecord",
            transforms=(f"{tmp_path}/t.py:to_example",),
        )
    )
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["record_format"] == "bytes"
    paths = [str(tmp_path / "ds" / s["path"]) for s in manifest["shards"]]
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "tokens": tf.io.VarLenFeature(tf.int64)}
    ds = tf.data.TFRecordDataset(paths).map(lambda x: tf.io.parse_single_example(x, spec))
    got = [(int(e["id"]), e["tokens"].values.numpy().tolist()) for e in ds]
    assert got == [(r["id"], r["tokens"]) for r in _json_records(9)]


def test_a_json_error_names_its_line_and_real_column(tmp_path):
    from tpufeed.beam.read.inputs import InputFile, read_input

    path = write_jsonl(
        tmp_path / "in.jsonl", ['{"id": 0}', '{"id": 3, "score": ', '{"name": "ré", "x": nope}']
    )
    bad = [str(r) for _, _, r in read_input(InputFile(path, "jsonl")) if not isinstance(r, dict)]
    assert bad == [
        f"{path} line 2: invalid JSON: Expecting value at column 20 (the end of the line)",
        f"{path} line 3: invalid JSON: Expecting value at column 21",
    ]


def test_progress_counts_to_a_total_with_an_eta(tmp_path, caplog, monkeypatch):
    import logging

    from tpufeed.beam.read import block_reader

    monkeypatch.setattr(block_reader, "_PROGRESS_EVERY_S", 0.0)  # a line per record
    write_jsonl(tmp_path / "a.jsonl", _json_records(3))
    write_jsonl(tmp_path / "b.jsonl", _json_records(3, start=3))
    caplog.set_level(logging.INFO, logger="tpufeed")
    build(
        BuildConfig(inputs=(str(tmp_path / "*.jsonl"),), output=str(tmp_path / "ds"), num_shards=2)
    )
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        line.startswith("building ")
        and line.endswith("from 2 input files into 2 array_record shards")
        for line in lines
    )
    reads = [line for line in lines if line.startswith("read ")]
    assert re.search(
        r"a\.jsonl: 3 records \(input 1 of 2; \d\d% of the input bytes, ETA \d+ s\)$", reads[0]
    )
    assert reads[1].endswith("b.jsonl: 3 records (input 2 of 2; 100% of the input bytes)")
    processed = [line for line in lines if line.startswith("processed ")]
    assert processed[2] == "processed 3 records (this worker)"
    assert "shards written, 100%)" in [line for line in lines if line.startswith("wrote ")][-1]


def test_a_transform_file_imports_the_modules_next_to_it(tmp_path):
    os.makedirs(tmp_path / "lib")
    (tmp_path / "lib" / "prep.py").write_text(
        "from build_test_sibling_helpers import tag\ndef prep(r):\n    return tag(r)\n"
    )
    (tmp_path / "lib" / "build_test_sibling_helpers.py").write_text(
        "def tag(r):\n    return {**r, 'tagged': True}\n"
    )
    write_jsonl(tmp_path / "in.jsonl", _json_records(3))
    build(
        BuildConfig(
            inputs=(str(tmp_path / "in.jsonl"),),
            output=str(tmp_path / "ds"),
            transforms=(f"{tmp_path}/lib/prep.py:prep",),
        )
    )
    assert [r["tagged"] for r in _all(tmp_path / "ds")] == [True] * 3


def _holes_supported(path) -> bool:
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    supported = os.stat(path).st_blocks * 512 < (1 << 20)
    os.remove(path)
    return supported


def test_small_shards_take_little_disk_and_array_record_reads_them(tmp_path):
    """ArrayRecord pads its footer and postscript to 64 KiB blocks, so a shard of 65 CSV rows
    is 128 KiB long; the padding is kept as holes, and ArrayRecord's own reader reads it."""
    from array_record.python.array_record_module import ArrayRecordReader

    if not _holes_supported(tmp_path / "probe"):
        pytest.skip("this filesystem does not keep holes in files")
    with open(tmp_path / "in.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows([[i, f"row {i}"] for i in range(65)])
    build(BuildConfig(inputs=(str(tmp_path / "in.csv"),), output=str(tmp_path / "ds")))
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    shard = tmp_path / "ds" / manifest["shards"][0]["path"]
    assert os.stat(shard).st_blocks * 512 <= 32 << 10  # was 128 KiB of disk
    reader = ArrayRecordReader(str(shard), "readahead_buffer_size:0")
    try:
        assert reader.num_records() == 65
        assert [tpufeed.codec.decode(r)["text"] for r in reader.read(list(range(65)))] == [
            f"row {i}" for i in range(65)
        ]
    finally:
        reader.close()
    assert len(_all(tmp_path / "ds")) == 65  # and the manifest's size and CRC32C still hold
