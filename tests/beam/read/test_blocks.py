"""Input blocks: a pure plan from file sizes, and block reads that together are the file read
whole (same records, indices and line numbers), whatever the block size."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("apache_beam")

from tpufeed.beam.read.blocks import count_block, file_starts, plan_blocks, read_block
from tpufeed.beam.read.inputs import InputFile, Malformed, expand_inputs, read_input
from tpufeed.errors import SourceError


def _by_blocks(files: list[InputFile], block_bytes: int) -> list[tuple[int, str, object]]:
    blocks = plan_blocks(files, block_bytes)
    counts = {b.id: count_block(b) for b in blocks}
    starts = file_starts(blocks, counts)
    out = []
    for block in blocks:
        got = list(read_block(block, starts[block.id]))
        assert len(got) == counts[block.id][0]  # the count pass agrees with the read
        out += got
    return out


def _whole(files: list[InputFile]) -> list[tuple[int, str, object]]:
    return [item for f in files for item in read_input(f)]


def _same(a, b) -> None:
    assert [(i, o) for i, o, _ in a] == [(i, o) for i, o, _ in b]
    for (_, _, x), (_, _, y) in zip(a, b):
        assert (str(x) if isinstance(x, Malformed) else x) == (
            str(y) if isinstance(y, Malformed) else y
        )


@pytest.mark.parametrize("block_bytes", [1, 7, 30, 64, 1 << 20])
def test_jsonl_blocks_read_what_the_whole_file_reads(tmp_path, block_bytes):
    lines = [json.dumps({"i": i, "s": "x" * (i % 13)}) for i in range(40)]
    lines[5], lines[17] = "", "   "  # blank lines are no records but count as lines
    lines[9] = "{not json"
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.jsonl").write_text('{"last": 1}')  # no final line end
    files = expand_inputs([str(tmp_path / "*.jsonl")])
    got = _by_blocks(files, block_bytes)
    _same(got, _whole(files))
    bad = [r for _, _, r in got if isinstance(r, Malformed)]
    assert len(bad) == 1 and str(bad[0]).startswith(f"{tmp_path / 'a.jsonl'} line 10: invalid JSON")


@pytest.mark.parametrize("block_bytes", [1, 9, 50, 1 << 20])
def test_csv_blocks_read_what_the_whole_file_reads(tmp_path, block_bytes):
    rows = ["id,name"] + [f"{i},n{i}" for i in range(30)]
    rows[7] = "6"  # a missing column: a bad record named by its line
    rows[12] = ""
    (tmp_path / "a.csv").write_text("\n".join(rows) + "\n")
    files = expand_inputs([str(tmp_path / "a.csv")])
    got = _by_blocks(files, block_bytes)
    _same(got, _whole(files))
    assert sum(isinstance(r, Malformed) for _, _, r in got) == 1


def test_a_quoted_line_break_in_a_csv_read_in_blocks_is_refused_by_line(tmp_path):
    (tmp_path / "a.csv").write_text('id,text\n1,plain\n2,"two\nlines"\n3,plain\n' + "4,x\n" * 20)
    files = expand_inputs([str(tmp_path / "a.csv")])
    assert [r for _, _, r in _by_blocks(files, 1 << 20)][1] == {"id": "2", "text": "two\nlines"}
    with pytest.raises(
        SourceError,
        match=r"a\.csv \(line 2 of the block from byte 14\): a quoted "
        "field holds a line break",
    ):
        _by_blocks(files, 16)  # the count pass meets it, before line numbers are known
    blocks = plan_blocks(files, 16)
    starts = file_starts(blocks, {b.id: count_block(b) for b in blocks[:1]})
    with pytest.raises(SourceError, match=r"a\.csv line 4: a quoted field holds a line break"):
        list(read_block(blocks[1], starts[1]))


def test_array_record_and_image_blocks_are_index_ranges(tmp_path):
    from tpufeed import codec
    from tpufeed.sources.array_record import write_array_records

    write_array_records(
        str(tmp_path / "r.array_record"), [codec.encode({"i": np.int64(i)}) for i in range(300)]
    )
    files = expand_inputs([str(tmp_path / "r.array_record")])
    assert [b.count for b in plan_blocks(files, 1 << 30)] == [300]
    blocks = plan_blocks(files, 1 << 12)
    assert len(blocks) > 1 and sum(b.count for b in blocks) == 300
    assert [(i, r["i"]) for i, _, r in _by_blocks(files, 1 << 12)] == [(i, i) for i in range(300)]


def test_the_plan_depends_on_the_file_sizes_only(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n' * 100)
    files = expand_inputs([str(tmp_path / "a.jsonl")])
    first, again = plan_blocks(files, 64), plan_blocks(files, 64)
    assert first == again and [b.id for b in first] == list(range(len(first)))
    assert [(b.start, b.end) for b in first][:2] == [(0, 60), (60, 120)]  # 15 even blocks
    assert first[-1].end == 900 and sum(b.size for b in first) == 900
    assert {b.size for b in first} == {60}
