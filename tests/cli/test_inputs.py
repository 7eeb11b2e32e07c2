"""`tpufeed inspect` and `tpufeed bench` over WebDataset tars, MDS folders, JSONL and CSV
(issue 44 item 6, issue 47: inspect refused JSONL and CSV, which build reads, and pointed to a
--format that could not help); each case runs the real command (`main`), on files written by
webdataset's own TarWriter and Streaming's own MDSWriter (tests/data/mds)."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from tests.sources.mds_data import DATA as MDS_DATA
from tpufeed.cli.inputs import input_format, text_samples
from tpufeed.cli.program import main
from tpufeed.errors import InvalidArgumentError


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def write_tars(folder, shards=2, per_shard=3):
    wds = pytest.importorskip("webdataset")
    paths = []
    for shard in range(shards):
        path = folder / f"train-{shard:06d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for i in range(per_shard):
                n = shard * per_shard + i
                writer.write(
                    {"__key__": f"s{n:04d}", "cls": str(n % 2), "npy": np.full(3, n, np.float32)}
                )
        paths.append(str(path))
    return paths


def one_line_error(capsys, args):
    """What `tpufeed ARGS` says on stderr, where it must end in one error line and exit 2."""
    assert main([*map(str, args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpufeed: error: ") and len(err.splitlines()) == 1, err
    return err


def inspect_json(capsys, *args):
    code = main(["inspect", *map(str, args), "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "paths, fmt, found",
    [
        (["a/train-{000000..000009}.tar"], None, "webdataset"),
        (["a/*.tgz"], None, "webdataset"),
        (["a/x.tar.gz"], None, "webdataset"),
        (["a/x.jsonl"], None, "jsonl"),
        (["a/x.NDJSON"], None, "jsonl"),
        (["a/x.csv"], None, "csv"),
        (["a/x.txt"], "csv", "csv"),
        (["a/x.array_record"], None, None),  # the registry decides, as before
        (["gs://b/mds"], "mds", "mds"),
    ],
)
def test_the_format_is_named_or_told_from_the_path(paths, fmt, found):
    assert input_format(paths, fmt) == found


def test_an_mds_folder_is_told_by_its_index(tmp_path):
    shutil.copytree(MDS_DATA / "plain", tmp_path / "mds")
    assert input_format([str(tmp_path / "mds")], None) == "mds"
    assert input_format([str(tmp_path / "mds" / "index.json")], None) == "mds"


def test_inspect_reads_webdataset_tars_by_glob_and_brace_range(tmp_path, capsys):
    write_tars(tmp_path)
    for given in (tmp_path / "*.tar", tmp_path / "train-{000000..000001}.tar"):
        code, report = inspect_json(capsys, given, "--verify")
        assert code == 0
        assert report["file_format"] == "webdataset" and report["num_records"] == 6
        assert [f["num_records"] for f in report["files"]] == [3, 3]
        fields = report["record_0"]["fields"]
        assert fields["__key__"]["repr"] == "'s0000'" and fields["cls"] == {
            "type": "int",
            "repr": "0",
        }
        assert fields["npy"] == {"dtype": "float32", "shape": [3], "repr": "[0., 0., 0.]"}
        assert report["verify"] == {"checked": 2, "method": "read", "failures": []}


def test_inspect_reads_an_mds_folder_as_streaming_wrote_it(tmp_path, capsys):
    folder = shutil.copytree(MDS_DATA / "plain", tmp_path / "mds")
    code, report = inspect_json(capsys, folder, "--verify")
    assert code == 0 and report["file_format"] == "mds"
    assert report["num_records"] == 9 and len(report["files"]) == 3
    assert report["record_0"]["fields"]["s_int64"] == {"dtype": "int64", "shape": [], "repr": "5"}
    code, named = inspect_json(capsys, folder, "--format", "mds")
    assert code == 0 and named["num_records"] == 9


def test_an_mds_dataset_is_one_folder(tmp_path, capsys):
    err = one_line_error(capsys, ["inspect", tmp_path / "a", tmp_path / "b", "--format", "mds"])
    assert "an MDS dataset is one folder" in err


def test_inspect_reads_jsonl_and_csv_as_the_build_does(tmp_path, capsys):
    jsonl = write_jsonl(tmp_path / "rows.jsonl", [{"text": "hi", "n": 1}, {"text": "yo", "n": 2}])
    (tmp_path / "rows.csv").write_text("text,n\nhi,1\nyo,2\nho,3\n")
    code, report = inspect_json(capsys, jsonl)
    assert code == 0 and report["file_format"] == "jsonl" and report["num_records"] == 2
    assert report["record_0"]["fields"]["n"] == {"type": "int", "repr": "1"}
    assert main(["inspect", str(tmp_path / "rows.csv")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 file, 3 records\n") and "  n: str = '1'" in out


def test_a_malformed_line_is_named_and_verify_lists_every_one(tmp_path, capsys):
    (tmp_path / "rows.csv").write_text("a,b\n1,x\n2\n3,y\n4\n")
    err = one_line_error(capsys, ["inspect", tmp_path / "rows.csv"])
    assert re.search(r"rows.csv line 3: row has 1 fields.*--verify lists every one", err)
    assert main(["inspect", str(tmp_path / "rows.csv"), "--verify"]) == 1
    captured = capsys.readouterr()
    assert "verify: 1 file: every line parsed" in captured.out
    assert captured.out.count("  FAILED ") == 2 and "rows.csv line 5: row has 1" in captured.out
    assert "2 lines failed verification" in captured.err


def test_verify_names_the_first_twenty_malformed_lines_and_counts_the_rest(tmp_path, capsys):
    (tmp_path / "rows.txt").write_text("a,b\n" + "1,2\n" * 30)  # CSV, read as JSONL
    code, report = inspect_json(capsys, tmp_path / "rows.txt", "--format", "jsonl", "--verify")
    assert code == 1 and report["num_records"] == 0
    failures = report["verify"]["failures"]
    assert len(failures) == 21 and failures[0].endswith(
        "rows.txt line 1: invalid JSON: Expecting value at column 1"
    )
    assert failures[-1] == "... and 11 more malformed lines"


def test_bench_runs_tars_mds_jsonl_and_csv(tmp_path, capsys):
    write_tars(tmp_path)
    jsonl = write_jsonl(tmp_path / "rows.jsonl", [{"x": [i, i]} for i in range(8)])
    (tmp_path / "rows.csv").write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(8)))
    mds = shutil.copytree(MDS_DATA / "conformance", tmp_path / "mds")
    for target in (tmp_path / "train-{000000..000001}.tar", mds, jsonl, tmp_path / "rows.csv"):
        args = ["bench", str(target), "--batches", "2", "--batch-size", "2", "--json"]
        assert main(args) == 0, target
        report = json.loads(capsys.readouterr().out)
        assert report["stats"]["records"] == 4, target


def test_bench_names_a_malformed_line_and_refuses_text_it_cannot_hold(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "rows.csv").write_text("a,b\n1,x\n2\n")
    err = one_line_error(capsys, ["bench", tmp_path / "rows.csv", "--batches", "1"])
    assert "rows.csv line 3: row has 1 fields" in err
    monkeypatch.setattr("tpufeed.cli.inputs.MAX_TEXT_BYTES", 9)
    with pytest.raises(
        InvalidArgumentError, match=r"more than bench holds in memory.*tpufeed build"
    ):
        text_samples([str(tmp_path / "rows.csv")], "csv")


def test_a_decode_transform_on_samples_is_refused_before_the_run(tmp_path, capsys):
    write_tars(tmp_path, shards=1)
    (tmp_path / "decode.py").write_text(
        "from tpufeed import codec\ndef decode(record):\n    return codec.decode(record)\n"
    )
    args = ["bench", tmp_path / "train-000000.tar", "--transform", f"{tmp_path}/decode.py:decode"]
    err = one_line_error(capsys, [*args, "--batches", "1"])
    assert "arrive already decoded, as dicts of arrays: leave out --transform" in err
