"""Chunks spilled to files between the build's readers and its shard writers: their files
round-trip (whole or a span), a damaged one fails with its path, and a build leaves none
behind, whether it finishes or fails after spilling."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("apache_beam")

from tpufeed.beam import BuildConfig, build
from tpufeed.beam.write import spill
from tpufeed.errors import SourceError


def test_a_chunk_round_trips_its_records_and_kinds_whole_or_a_span(tmp_path):
    path = spill.chunk_path(str(tmp_path / "ds"), "b1", 3, 1234)
    temp = tmp_path / ".ds.tpufeed-build-b1" / ".tpufeed-tmp-b1"  # in the staging folder
    assert path == str(temp / "chunk-0000003-000000001234")
    datas = [b"", b"a", bytes(range(256)) * 40, b"\x00\n"]
    spill.write_chunk(path, datas, bytes([0, 1, 0, 1]))
    assert spill.read_chunk(path, 4) == (datas, bytes([0, 1, 0, 1]))
    assert spill.read_chunk(path, 4, 1, 3) == (datas[1:3], bytes([1, 0]))
    assert spill.read_chunk(path, 4, 3, 4) == (datas[3:], bytes([1]))
    assert spill.read_chunk(path, 4, 2, 2) == ([], b"")
    assert os.listdir(temp) == ["chunk-0000003-000000001234"]
    spill.write_chunk(path, [], b"")  # a retried step rewrites the file whole
    assert spill.read_chunk(path, 0) == ([], b"")
    spill.delete_chunks([path, path + "-missing"])
    assert os.listdir(temp) == []


def test_a_damaged_or_missing_chunk_fails_naming_the_file(tmp_path):
    path = str(tmp_path / "chunk")
    spill.write_chunk(path, [b"abc", b"defg"], b"\x00\x00")
    with pytest.raises(SourceError, match=r"chunk: expected 3 records, the file holds 2"):
        spill.read_chunk(path, 3)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-1])
    with pytest.raises(SourceError, match=r"chunk: 48 bytes, its lengths add up to 49 \(truncated"):
        spill.read_chunk(path, 2)
    with open(path, "wb") as f:
        f.write(b"not a chunk at all, but long enough")
    with pytest.raises(SourceError, match=r"expected 2 records, the file is not a chunk"):
        spill.read_chunk(path, 2)
    with pytest.raises(SourceError, match=r"cannot read the spilled chunk .*gone"):
        spill.read_chunk(str(tmp_path / "gone"), 2)
    with pytest.raises(ValueError, match="2 records with 1 kinds"):
        spill.write_chunk(path, [b"a", b"b"], b"\x00")


def _input(tmp_path) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"id": i, "text": "t" * (i % 9)}) + "\n" for i in range(300))
    )
    return str(path)


def test_a_build_spills_its_chunks_and_leaves_none(tmp_path, monkeypatch):
    spilled: list[str] = []
    write = spill.write_chunk

    def noting(path, datas, kinds):
        spilled.append(path)
        write(path, datas, kinds)

    monkeypatch.setattr(spill, "write_chunk", noting)  # the in-process runner's steps see it
    summary = build(
        BuildConfig(
            inputs=(_input(tmp_path),), output=str(tmp_path / "o"), num_shards=3, block_bytes=1000
        )
    )
    assert summary["records_out"] == 300
    assert len(spilled) > 3 and all(".tpufeed-tmp-" in p for p in spilled)  # many small blocks
    assert not any(os.path.exists(p) for p in spilled)
    assert sorted(os.listdir(tmp_path / "o")) == [
        f"data-0000{i}-of-00003.array_record" for i in range(3)
    ] + ["manifest.json"]


def test_a_build_that_fails_after_spilling_removes_its_chunks(tmp_path, monkeypatch):
    def failing(path, count, start=0, stop=None):
        raise SourceError(f"cannot read the spilled chunk {path}: injected", path=path)

    monkeypatch.setattr(spill, "read_chunk", failing)
    with pytest.raises(Exception, match="cannot read the spilled chunk .*injected"):
        build(BuildConfig(inputs=(_input(tmp_path),), output=str(tmp_path / "o"), num_shards=2))
    out = tmp_path / "o"
    assert not out.exists() or os.listdir(out) == []  # no chunks, partial shard or manifest
    assert not any(".tpufeed-build-" in n for n in os.listdir(tmp_path))  # no staging folder
