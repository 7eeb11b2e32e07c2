"""The record cache's files: checked on read, bounded across processes, written whole by
concurrent writers, and the entries of keys nobody uses removed."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tpufeed.errors import InvalidArgumentError
from tpufeed.storage.record_cache import RecordFiles

HEADER = 16


def payload(record: int, size: int = 1000) -> bytes:
    return bytes([record % 251]) * size


def write_all(directory: str, key: str, max_bytes: int, records: range) -> None:
    files = RecordFiles(directory, key, max_bytes)
    for record in records:
        files.put([(record, payload(record))])


@pytest.mark.multiprocess
def test_concurrent_writers_leave_whole_entries_within_the_limit(tmp_path):
    limit = 40 * (HEADER + 1000) + 500  # 40 entries' worth, for 4 writers of 30 records each
    context = multiprocessing.get_context("fork")
    writers = [
        context.Process(target=write_all, args=(str(tmp_path), "k", limit, range(i, i + 30)))
        for i in (0, 0, 20, 40)  # two write the very same records
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    files = RecordFiles(str(tmp_path), "k", limit)
    found = {r: files.get(r) for r in range(70)}
    stored = {r: bytes(p) for r, p in found.items() if p is not None}
    assert stored and all(p == payload(r) for r, p in stored.items())
    on_disk = [os.path.join(root, n) for root, _, names in os.walk(tmp_path / "k") for n in names]
    entries = [p for p in on_disk if os.path.basename(p).isdigit()]
    assert len(entries) == len(stored)  # no temporary file left behind
    assert not [p for p in on_disk if ".tmp-" in p]
    assert sum(os.path.getsize(p) for p in entries) <= files.usage() <= limit


def test_once_full_a_process_writes_no_more(tmp_path):
    files = RecordFiles(str(tmp_path), "k", 3 * (HEADER + 1000))
    assert files.put([(r, payload(r)) for r in range(5)]) == 3
    assert files.full and files.put([(9, b"x")]) == 0
    assert [files.get(r) is not None for r in range(5)] == [True] * 3 + [False] * 2


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda data: data[:10], "too short"),
        (lambda data: b"XXXX" + data[4:], "damaged header"),
        (lambda data: data[:-1], "damaged header"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "CRC32C"),
    ],
)
def test_a_damaged_entry_is_removed_with_a_warning(tmp_path, caplog, damage, problem):
    files = RecordFiles(str(tmp_path), "k", 1 << 20)
    files.put([(7, payload(7))])
    used = files.usage()
    path = files.path(7)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damage(data))
    assert files.get(7) is None
    assert problem in caplog.text and path in caplog.text
    assert not os.path.exists(path)
    assert files.usage() < used  # its room is free again
    files.put([(7, payload(7))])
    assert bytes(files.get(7)) == payload(7)


def test_keys_nobody_holds_are_removed_and_held_ones_kept(tmp_path):
    old = RecordFiles(str(tmp_path), "old", 1 << 20)
    old.put([(1, payload(1))])
    context = multiprocessing.get_context("fork")
    holder = context.Process(target=write_all, args=(str(tmp_path), "held", 1 << 20, range(1)))
    holder.start()
    holder.join(60)  # exited: it holds "held" no more
    live = RecordFiles(str(tmp_path), "live", 1 << 20)
    live.put([(1, payload(1))])  # this process holds "old" and "live": both stay
    assert os.path.isdir(tmp_path / "old") and os.path.isdir(tmp_path / "live")
    assert not os.path.exists(tmp_path / "held")


def test_a_directory_it_cannot_create_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    files = RecordFiles(str(tmp_path / "file" / "cache"), "k", 100)
    with pytest.raises(InvalidArgumentError, match="cannot create .*file/cache/k"):
        files.get(0)
