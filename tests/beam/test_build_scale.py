"""The build at scale, in small: input order, balance within one record and byte-identical
shards whatever the block size and the number of worker processes; the shard-size guard;
shards written in place with the manifest last."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tests.beam.expanding import EXPAND
from tpufeed import cli
from tpufeed.beam import BuildConfig, build
from tpufeed.beam.read.block_plan import plan_blocks
from tpufeed.beam.read.block_reader import ReadBlock
from tpufeed.beam.read.inputs import expand_inputs
from tpufeed.beam.write.shard_size import check_shard_size, suggest_num_shards
from tpufeed.errors import InvalidArgumentError, SourceError, TransformError
from tpufeed.sources.built.record_formats import get_record_format


def _inputs(tmp_path) -> list[str]:
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(90):
            f.write(
                json.dumps({"id": i, "text": "w" * (i % 17)}) + ("\n\n" if i % 11 == 0 else "\n")
            )
    with open(tmp_path / "b.csv", "w") as f:
        f.write("id,text\n" + "".join(f"{i},c{'x' * (i % 5)}\n" for i in range(90, 150)))
    (tmp_path / "t.py").write_text(EXPAND)
    return [str(tmp_path / "a.jsonl"), str(tmp_path / "b.csv")]


def _cast(record: dict) -> dict:
    return dict(record, id=int(record["id"]))


def _build(tmp_path, name: str, **kwargs) -> dict[str, bytes]:
    (tmp_path / "cast.py").write_text("def cast(r):\n    return dict(r, id=int(r['id']))\n")
    out = tmp_path / name
    build(
        BuildConfig(
            inputs=tuple(_inputs(tmp_path)),
            output=str(out),
            num_shards=4,
            transforms=(f"{tmp_path / 'cast.py'}:cast", f"{tmp_path / 't.py'}:expand"),
            **kwargs,
        )
    )
    files = {}
    for entry in sorted(os.listdir(out)):
        with open(out / entry, "rb") as f:
            files[entry] = f.read()
    return files


def _expected_ids() -> list[tuple[int, int]]:
    ids = []
    for i in range(150):
        if i % 7 == 3:
            continue
        ids += [(i, 0), (i, 1)] if i % 5 == 0 else [(i, 0)]
    return ids


def _check_order_and_balance(root) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    counts = [s["num_records"] for s in manifest["shards"]]
    assert max(counts) - min(counts) <= 1
    source = tpufeed.Dataset.open(root, verify=True).source
    got = [(int(r["id"]), int(r.get("copy", 0))) for r in source.__getitems__(range(len(source)))]
    assert got == _expected_ids()  # input order, a record's outputs in their order


def test_many_small_blocks_give_the_shards_of_one_block(tmp_path):
    whole = _build(tmp_path, "whole")
    small = _build(tmp_path, "small", block_bytes=40)  # about one line a block
    assert small == whole
    assert sorted(whole) == [
        "data-00000-of-00004.array_record",
        "data-00001-of-00004.array_record",
        "data-00002-of-00004.array_record",
        "data-00003-of-00004.array_record",
        "manifest.json",
    ]  # no temporary left
    _check_order_and_balance(tmp_path / "small")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_worker_processes_give_the_shards_of_one(tmp_path):
    one = _build(tmp_path, "one", block_bytes=64)
    two = _build(tmp_path, "two", block_bytes=64, workers=2)
    assert two == one
    _check_order_and_balance(tmp_path / "two")


def test_a_shard_too_large_for_a_worker_is_refused_early_with_the_numbers(tmp_path, capsys):
    with open(tmp_path / "in.jsonl", "w") as f:
        f.write(('{"text": "%s"}\n' % ("x" * 1000)) * 2200)  # about 2.1 MB
    code = cli.main(
        [
            "build",
            "-q",
            "--input",
            str(tmp_path / "in.jsonl"),
            "--output",
            str(tmp_path / "out"),
            "--num-shards",
            "1",
            "--max-shard-mb",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert (
        code == 2 and "2 MB of input in 1 shards is about 2 MB a shard, more than the 1 MB" in err
    )
    assert "pass --num-shards 3" in err and not (tmp_path / "out").exists()


def test_the_default_shard_count_follows_the_input_size():
    assert suggest_num_shards(0) == 1 and suggest_num_shards(100 << 20) == 1
    assert suggest_num_shards(1 << 40) == 4096  # 1 TB: shards of 256 MB
    with pytest.raises(
        InvalidArgumentError,
        match=r"1,024.0 GB of input in 64 shards is about "
        r"16.0 GB a shard.*--num-shards 4096",
    ):
        check_shard_size(1 << 40, 64, 2 << 30, "gs://b/ds")  # the README's old example
    check_shard_size(1 << 40, 4096, 2 << 30, "gs://b/ds")


def test_default_build_writes_one_shard_for_a_small_input(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    summary = build(BuildConfig(inputs=(str(tmp_path / "in.jsonl"),), output=str(tmp_path / "o")))
    assert summary["shards"] == 1 and summary["records_out"] == 2


def test_a_failed_rebuild_leaves_the_old_dataset_whole_and_no_partial_shard(tmp_path):
    (tmp_path / "in.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(40)))
    build(
        BuildConfig(inputs=(str(tmp_path / "in.jsonl"),), output=str(tmp_path / "o"), num_shards=2)
    )
    before = {n: (tmp_path / "o" / n).read_bytes() for n in os.listdir(tmp_path / "o")}
    (tmp_path / "t.py").write_text(
        "def f(r):\n    if r['id'] == 33:\n        raise ValueError('no')\n    return r\n"
    )
    with pytest.raises(
        TransformError, match=r"in\.jsonl line 34: --transform .* raised ValueError: no"
    ):
        build(
            BuildConfig(
                inputs=(str(tmp_path / "in.jsonl"),),
                output=str(tmp_path / "o"),
                num_shards=2,
                transforms=(f"{tmp_path / 't.py'}:f",),
                overwrite=True,
                block_bytes=64,
            )
        )
    assert {n: (tmp_path / "o" / n).read_bytes() for n in os.listdir(tmp_path / "o")} == before
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "o", "t.py"]  # no staging folder left
    source = tpufeed.Dataset.open(tmp_path / "o", verify=True).source
    assert [r["id"] for r in source.__getitems__(range(40))] == list(range(40))


def _lines_with_bad(tmp_path) -> str:
    """80 JSONL records, some blank lines, and three bad lines in later blocks: one not JSON,
    one not an object, one with another key."""
    lines = [json.dumps({"id": i, "text": "t" * (i % 9)}) for i in range(80)]
    for at in (10, 30, 60):
        lines.insert(at, "")
    lines.insert(46, '{"id": oops}')
    lines.insert(70, "[1, 2]")
    lines.insert(87, json.dumps({"id": 99, "other": 1}))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_build_without_transforms_reads_blocks_uncounted_and_still_names_true_lines(tmp_path):
    """No --transform: the blocks are not counted before reading (their starts only name bad
    records); a bad record in a later block is named by its line in the file all the same, and
    the shards are those of one block."""
    path = _lines_with_bad(tmp_path)
    lines = open(path).read().splitlines()
    bad = [n for n, line in enumerate(lines, 1) if "oops" in line or "[" in line or "other" in line]
    assert len(bad) == 3 and bad[0] > 40
    config = dict(inputs=(path,), num_shards=3, max_bad=3)
    whole = build(BuildConfig(output=str(tmp_path / "whole"), **config))
    small = build(BuildConfig(output=str(tmp_path / "small"), block_bytes=50, **config))
    assert small["blocks"] > 20 and whole["blocks"] == 1
    for name in ("whole", "small"):
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        examples = manifest["build"]["skipped_examples"]
        assert [e.split(": ")[0] for e in examples] == [f"{path} line {n}" for n in bad], examples
        assert "invalid JSON" in examples[0] and "expected a JSON object" in examples[1]
        assert "has keys" in examples[2] or "key" in examples[2]
    files = sorted(os.listdir(tmp_path / "whole"))
    assert files == sorted(os.listdir(tmp_path / "small"))
    for entry in files:
        if entry != "manifest.json":
            assert (tmp_path / "whole" / entry).read_bytes() == (
                tmp_path / "small" / entry
            ).read_bytes()
    with pytest.raises(SourceError, match=rf"in\.jsonl line {bad[0]}: invalid JSON"):
        build(BuildConfig(output=str(tmp_path / "strict"), inputs=(path,), block_bytes=50))
    # The step itself (Beam's re-raise keeps the message only): the record's index in its file.
    blocks = plan_blocks(expand_inputs([path]), 50)
    step = ReadBlock((), True, get_record_format("codec"), 0, len(blocks), uncounted=blocks)
    step.setup()
    with pytest.raises(SourceError, match=rf"line {bad[0]}: invalid JSON") as raised:
        for block in blocks:
            list(step.process(block))
    assert raised.value.record == sum(1 for line in lines[: bad[0] - 1] if line)
