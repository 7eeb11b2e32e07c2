"""The record cache's files: checked on read, bounded across processes, written whole by
concurrent writers, and the entries of keys nobody uses removed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
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


WRITER = """
import sys
from tpufeed.storage.record_cache import RecordFiles
files = RecordFiles(sys.argv[1], "k", 1 << 40)
first = int(sys.argv[2])
for start in range(first, first + 10_000, 4):
    files.put([(r, bytes([r % 251]) * (4 << 20)) for r in range(start, start + 4)])  # 4 MiB
"""


def stop(proc: subprocess.Popen) -> None:
    """SIGSTOP, and wait until the process is stopped (the signal lands a little later)."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, "the process did not stop"
        time.sleep(0.001)


def temporaries(folder) -> list[str]:
    return sorted(n for _, _, names in os.walk(folder) for n in names if ".tmp-" in n)


def writer_in_the_middle_of_an_entry(folder, first: int) -> subprocess.Popen:
    """A writer process of records `first`, ..., stopped (SIGSTOP) while an entry's temporary
    file of its is there."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(first)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if [n for n in temporaries(folder) if f"-{proc.pid}-" in n and n[0].isdigit()]:
            stop(proc)
            if [n for n in temporaries(folder) if f"-{proc.pid}-" in n and n[0].isdigit()]:
                return proc
            proc.send_signal(signal.SIGCONT)
    proc.kill()
    pytest.fail("the writer was never seen in the middle of writing an entry")


def entry_bytes(folder) -> int:
    names = [os.path.join(r, n) for r, _, ns in os.walk(folder) for n in ns if n.isdigit()]
    return sum(os.path.getsize(p) for p in names)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_the_next_opener_cleans_up_after_a_writer_killed_in_a_put_and_keeps_a_live_ones(tmp_path):
    killed = writer_in_the_middle_of_an_entry(tmp_path, 0)
    live = writer_in_the_middle_of_an_entry(tmp_path, 5000)  # stopped, alive: its files stay
    try:
        killed.kill()
        killed.wait(10)
        mine = [n for n in temporaries(tmp_path) if f"-{killed.pid}-" in n]
        assert len(mine) == 2 and mine[-1].startswith("writing")  # an entry's, and the marker
        files = RecordFiles(str(tmp_path), "k", 1 << 40)
        files.get(0)  # opens the key: the killed writer's files go
        left = temporaries(tmp_path)
        assert not [n for n in left if f"-{killed.pid}-" in n]
        assert len([n for n in left if f"-{live.pid}-" in n]) == 2
    finally:
        live.kill()
        live.wait(10)
    files = RecordFiles(str(tmp_path), "k", 1 << 40)
    files.get(0)
    assert temporaries(tmp_path) == []
    assert files.usage() == entry_bytes(tmp_path / "k")  # the room of unwritten entries back


def dead_writers_name(path: str) -> str:
    """`path` as a temporary of a writer on this host that is gone (no such pid)."""
    return f"{path}.tmp-{socket.gethostname()}-999999999-1-abcd"


def test_without_a_marker_opening_a_key_walks_no_entries(tmp_path):
    """A dead writer's temporary with no marker (a put never leaves one so) stays: opening a key
    lists its folder, not its entries. A marker names where to look."""
    files = RecordFiles(str(tmp_path), "k", 1 << 20)
    files.put([(1, payload(1))])
    stray = dead_writers_name(files.path(2))
    open(stray, "wb").close()
    RecordFiles(str(tmp_path), "k", 1 << 20).get(1)  # another opener
    assert os.path.exists(stray)
    marker = dead_writers_name(os.path.join(files.root, "writing"))
    with open(marker, "w") as f:
        f.write(f"2 {HEADER + 1000}\n")
    RecordFiles(str(tmp_path), "k", 1 << 20).get(1)
    assert not os.path.exists(stray) and not os.path.exists(marker)


def test_a_marker_cut_short_makes_the_opener_look_through_the_whole_key(tmp_path):
    files = RecordFiles(str(tmp_path), "k", 1 << 20)
    files.put([(5000, payload(5000))])
    stray = dead_writers_name(files.path(5001))
    open(stray, "wb").close()
    marker = dead_writers_name(os.path.join(files.root, "writing"))
    with open(marker, "w") as f:
        f.write("5001 10")  # no end of line: its writer died while leaving it
    RecordFiles(str(tmp_path), "k", 1 << 20).get(5000)
    assert not os.path.exists(stray) and not os.path.exists(marker)
    assert bytes(files.get(5000)) == payload(5000)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_an_entry_that_is_not_a_regular_file_is_removed_with_a_warning(tmp_path, caplog, kind):
    files = RecordFiles(str(tmp_path), "k", 1 << 20)
    files.put([(7, payload(7))])
    path = files.path(7)
    os.remove(path)
    os.mkfifo(path) if kind == "fifo" else os.mkdir(path)
    assert files.get(7) is None  # never opened for reading: no wait for a writer
    assert ("FIFO" if kind == "fifo" else "directory") in caplog.text and path in caplog.text
    assert not os.path.lexists(path)
    files.put([(7, payload(7))])
    assert bytes(files.get(7)) == payload(7)


@pytest.mark.parametrize("how", ["renamed", "symlink", "another key's"])
def test_an_entry_in_another_entrys_place_is_removed_with_a_warning(tmp_path, caplog, how):
    """Each entry's CRC32C covers its key and record: a whole, sound entry moved or linked
    into another's place is taken for a damaged one, never read as that record."""
    files = RecordFiles(str(tmp_path), "k", 1 << 20)
    other = RecordFiles(str(tmp_path), "other", 1 << 20)
    files.put([(5, payload(5)), (6, payload(6))])
    other.put([(5, payload(99))])
    if how == "renamed":
        os.replace(files.path(6), files.path(5))
    elif how == "symlink":
        os.remove(files.path(5))
        os.symlink(files.path(6), files.path(5))
    else:
        os.replace(other.path(5), files.path(5))
    assert files.get(5) is None
    said = "is a symlink" if how == "symlink" else "another record's entry"  # never followed
    assert "record 5" in caplog.text and said in caplog.text
    assert not os.path.lexists(files.path(5))
    files.put([(5, payload(5))])
    assert bytes(files.get(5)) == payload(5)
