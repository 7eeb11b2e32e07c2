"""The build's JSONL and CSV inputs within bounds: an enormous line is refused by name before it
is held, deep nesting and huge numbers are bad records named by line, bad UTF-8 is named by
line, and a FIFO in place of an input is refused without blocking."""

from __future__ import annotations

import os
import tracemalloc

import pytest

pytest.importorskip("apache_beam")

from tpufeed.beam.read import inputs
from tpufeed.beam.read.blocks import count_block, file_starts, plan_blocks, read_block
from tpufeed.beam.read.inputs import InputFile, Malformed, read_input
from tpufeed.errors import CorruptDataError, SourceError

_LIMIT = 4096  # the line bound, made small so that the test's "enormous" line is 4 MiB


def _by_blocks(item: InputFile, block_bytes: int) -> list:
    blocks = plan_blocks([item], block_bytes)
    starts = file_starts(blocks, {b.id: count_block(b) for b in blocks})
    return [r for b in blocks for r in read_block(b, starts[b.id])]


def _whole(item: InputFile) -> list:
    return list(read_input(item))


@pytest.mark.parametrize(
    "read", [_whole, lambda item: _by_blocks(item, 64 << 10)], ids=["whole", "blocks"]
)
@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_an_enormous_line_is_refused_naming_the_file_and_line_within_memory(
    tmp_path, monkeypatch, kind, read
):
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", _LIMIT)
    path = tmp_path / f"big.{kind}"
    head = "a,b\n1,2\n" if kind == "csv" else '{"a": 1}\n{"a": 2}\n'
    with open(path, "w") as f:
        f.write(head)
        f.write("x" * (4 << 20))  # 4 MiB without a line end: 1024 times the bound
    tracemalloc.start()
    try:
        with pytest.raises(CorruptDataError, match=f"longer than {_LIMIT:,} bytes") as e:
            read(InputFile(str(path), kind))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(path) in str(e.value) and "line 3" in str(e.value)
    assert peak < 1 << 20  # never the whole line


@pytest.mark.parametrize(
    "line, why",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"n": ' + "9" * 5000 + "}", "invalid JSON"),  # more digits than int() converts
        ('{"n": 1e999999}', None),  # a float: inf, a value like any other
    ],
    ids=["deep-array", "deep-value", "huge-int", "huge-float"],
)
def test_deep_nesting_and_absurd_numbers_are_bad_records_named_by_line(tmp_path, line, why):
    path = tmp_path / "a.jsonl"
    path.write_text('{"ok": 1}\n' + line + '\n{"ok": 2}\n')
    for got in (
        _whole(InputFile(str(path), "jsonl")),
        _by_blocks(InputFile(str(path), "jsonl"), 64),
    ):
        assert [r for _, _, r in got][0] == {"ok": 1} and got[2][2] == {"ok": 2}
        record = got[1][2]
        if why is None:
            assert record == {"n": float("inf")}
        else:
            assert isinstance(record, Malformed) and why in record.cause
            assert str(record).startswith(f"{path} line 2: ")


def test_bad_utf8_is_named_by_file_and_line(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_bytes(b'{"a": 1}\n{"a": "\xff\xfe"}\n')
    record = _whole(InputFile(str(jsonl), "jsonl"))[1][2]
    assert isinstance(record, Malformed) and str(record).startswith(f"{jsonl} line 2: not UTF-8")
    csv = tmp_path / "a.csv"
    csv.write_bytes(b"a,b\n1,2\n3,\xff\n")
    with pytest.raises(SourceError, match=f"{csv} line 3: not UTF-8"):
        _whole(InputFile(str(csv), "csv"))


@pytest.mark.timeout(60)  # opening a FIFO the ordinary way blocks forever
@pytest.mark.parametrize("kind", ["jsonl", "csv", "tfrecord"])
def test_a_fifo_in_place_of_an_input_is_refused_without_blocking(tmp_path, kind):
    path = str(tmp_path / f"pipe.{kind}")
    os.mkfifo(path)
    with pytest.raises(SourceError, match="is a FIFO") as e:
        _whole(InputFile(path, kind))
    assert e.value.path == path


@pytest.mark.timeout(60)
def test_a_fifo_named_like_an_image_is_refused_without_blocking(tmp_path):
    pytest.importorskip("PIL")
    folder = tmp_path / "images" / "cats"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "a.jpg")
    with pytest.raises(SourceError, match="is a FIFO"):
        _whole(InputFile(str(tmp_path / "images"), "images"))
