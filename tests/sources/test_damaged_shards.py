"""A byte flipped in one shard of a built dataset: only the records of the damaged chunk are
lost, each counted by `ignore_errors`; damage to what locates the chunks (the file's header,
its footer and postscript) loses the whole shard, each of its records counted; a replaced
shard is refused. Shards are written by array_record's own writer."""

from __future__ import annotations

import json
import os

import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

import tpufeed
from tests.dataset_folder import make_dataset, write_manifest
from tpufeed import codec
from tpufeed.errors import CorruptDataError
from tpufeed.sources.built.manifest import file_crc32c

_SHARDS, _PER_SHARD = 4, 2500
_DAMAGED = "data-00001-of-00004.array_record"


def _write(path, records: list[dict], group_size: int) -> None:
    writer = ArrayRecordWriter(str(path), f"group_size:{group_size}")
    for record in records:
        writer.write(codec.encode(record))
    writer.close()


def _dataset(tmp_path, group_size: int, offset: int | None) -> tuple[str, list[int]]:
    """4 shards of 2,500 records, shard 1 in chunks of `group_size` records with the byte at
    `offset` (from the end if negative) flipped; (root, the indices array_record itself
    cannot read in that shard)."""
    root = tmp_path / "ds"
    shards = [[{"id": s * _PER_SHARD + i} for i in range(_PER_SHARD)] for s in range(_SHARDS)]
    manifest = make_dataset(root, shards)
    path = root / _DAMAGED
    _write(path, shards[1], group_size)
    size, crc = file_crc32c(str(path))
    manifest["shards"][1].update(num_bytes=size, crc32c=crc)
    write_manifest(root, manifest)
    if offset is None:
        return str(root), []
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    return str(root), _unreadable(str(path))


def _unreadable(path: str) -> list[int]:
    """The records of `path` that array_record's reader fails on, one read each."""
    reader = ArrayRecordReader(path, "readahead_buffer_size:0")
    bad = []
    for i in range(reader.num_records()):
        try:
            reader.read([i])
        except RuntimeError:
            bad.append(i)
            reader.close()
            reader = ArrayRecordReader(path, "readahead_buffer_size:0")
    reader.close()
    return bad


def _ids(root: str, max_errors: int) -> list[int]:
    return [int(r["id"]) for r in tpufeed.Dataset.open(root).ignore_errors(max_errors)]


@pytest.mark.parametrize("group_size", [1, 100])
@pytest.mark.parametrize("offset", [2_000, 5_000])
def test_a_flipped_byte_in_chunk_data_loses_only_its_chunk(tmp_path, caplog, group_size, offset):
    root, bad = _dataset(tmp_path, group_size, offset)
    assert len(bad) == group_size  # the format's granularity: one chunk
    assert bad == list(range(bad[0], bad[0] + group_size)) and bad[0] % group_size == 0
    lost = [_PER_SHARD + i for i in bad]
    expected = [i for i in range(_SHARDS * _PER_SHARD) if i not in lost]
    assert _ids(root, len(bad)) == expected  # each lost record counted once, nothing else lost
    assert f"{_DAMAGED} is damaged (its CRC32C differs from the manifest's)" in caplog.text
    with pytest.raises(CorruptDataError) as caught:  # one record too many
        _ids(root, len(bad) - 1)
    assert caught.value.record == bad[-1] and caught.value.path.endswith(_DAMAGED)
    if len(bad) > 1:  # else a plain pipeline, with no ignore_errors
        assert f"this was bad record {len(bad)}" in "".join(caught.value.__notes__)
    with pytest.raises(CorruptDataError, match=rf"{_DAMAGED} record {bad[0]} cannot be read"):
        list(tpufeed.Dataset.open(root))


@pytest.mark.parametrize("where, offset", [("header", 10), ("postscript", -30)])
def test_damage_where_the_chunks_are_located_loses_the_shard_record_by_record(
    tmp_path, where, offset
):
    root, _ = _dataset(tmp_path, 100, offset)
    others = [i for i in range(_SHARDS * _PER_SHARD) if not _PER_SHARD <= i < 2 * _PER_SHARD]
    assert _ids(root, _PER_SHARD) == others
    with pytest.raises(CorruptDataError) as caught:
        _ids(root, 100)
    assert caught.value.path.endswith(_DAMAGED) and caught.value.record == 100
    assert str(caught.value).startswith(f"{root}/{_DAMAGED} record 100 cannot be read: ")
    assert "this was bad record 101" in "".join(caught.value.__notes__)


def test_a_replaced_shard_that_reads_cleanly_is_refused_whole(tmp_path):
    root, _ = _dataset(tmp_path, 1, None)
    path = os.path.join(root, _DAMAGED)
    size = os.path.getsize(path)
    _write(path, [{"id": 90_000 + i} for i in range(_PER_SHARD)], 1)  # same count, same size
    assert os.path.getsize(path) == size
    with pytest.raises(CorruptDataError, match="not the one the manifest describes"):
        list(tpufeed.Dataset.open(root))
    assert _ids(root, _PER_SHARD) == [
        i for i in range(_SHARDS * _PER_SHARD) if not _PER_SHARD <= i < 2 * _PER_SHARD
    ]


def test_verify_still_refuses_a_damaged_shard(tmp_path):
    root, bad = _dataset(tmp_path, 1, 40_000)
    assert bad
    with pytest.raises(CorruptDataError, match=rf"{_DAMAGED}: CRC32C is .* the manifest says"):
        tpufeed.Dataset.open(root, verify=True)
    assert json.loads(open(os.path.join(root, "manifest.json")).read())["num_records"] == 10_000
