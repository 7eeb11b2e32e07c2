"""Derived files: named by the source's whole identity, written atomically with a CRC32C
trailer, checked on first use, removed and made again when bad; dead writers' temporaries go."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tpufeed.storage import derived
from tpufeed.storage.derived import (
    derived_name,
    open_derived,
    read_derived,
    remove_dead_temporaries,
    remove_dead_temporaries_once,
    temporary_name,
    write_derived,
)
from tpufeed.storage.opener import FileIdentity


@pytest.fixture(autouse=True)
def fresh_process_check(monkeypatch):
    """Each test sees what a new process sees: nothing checked yet."""
    monkeypatch.setattr(derived, "_verified", set())


def _identity(path) -> FileIdentity:
    return FileIdentity.of(os.stat(path))


def test_the_name_changes_with_every_part_of_the_identity(tmp_path):
    source = tmp_path / "x.tar"
    source.write_bytes(b"x")
    pin = _identity(source)
    names = {
        derived_name(str(source), pin, ".idx"),
        derived_name(str(source), pin._replace(inode=pin.inode + 1), ".idx"),
        derived_name(str(source), pin._replace(device=pin.device + 1), ".idx"),
        derived_name(str(source), pin._replace(size=2), ".idx"),
        derived_name(str(source), pin._replace(mtime_ns=1), ".idx"),
        derived_name(str(tmp_path / "y.tar"), pin, ".idx"),
        derived_name("s3://bucket/x.tar", '"etag-1"', ".idx"),
        derived_name("s3://bucket/x.tar", '"etag-2"', ".idx"),
    }
    assert len(names) == 8
    assert all(name.endswith("-x.tar.idx") or name.endswith("-y.tar.idx") for name in names)
    assert derived_name(str(source), pin, ".idx") == derived_name(str(source), pin, ".idx")


def test_a_written_file_reads_back_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "d")
    write_derived(path, lambda f: (f.write(b"hello "), f.write(memoryview(b"world"))))
    assert read_derived(path, "the test file") == b"hello world"
    assert os.listdir(tmp_path) == ["d"]
    found = open_derived(path, "the test file")
    assert found is not None and found.size == 11
    os.close(found.fd)


def test_a_missing_file_is_none_without_a_warning(tmp_path, recwarn):
    assert read_derived(str(tmp_path / "none"), "the test file") is None
    assert not recwarn.list


@pytest.mark.parametrize(
    "damage, words",
    [
        ("flip", "fails its CRC32C check"),
        ("cut", "no whole trailer"),
        ("tiny", "too short for its trailer"),
        ("fifo", "FIFO"),
        ("folder", "directory"),
        ("link out", "outside"),
    ],
)
@pytest.mark.timeout(10)
def test_a_bad_derived_file_is_removed_with_a_warning(tmp_path, damage, words):
    (tmp_path / "own").mkdir()
    path = str(tmp_path / "own" / "d")
    write_derived(path, lambda f: f.write(b"payload " * 1000))
    if damage == "flip":
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"X")
    elif damage == "cut":
        os.truncate(path, os.path.getsize(path) - 1)
    elif damage == "tiny":
        os.truncate(path, 3)
    elif damage == "fifo":
        os.remove(path)
        os.mkfifo(path)
    elif damage == "folder":
        os.remove(path)
        os.mkdir(path)
    else:  # a link to a good derived file of another folder: not this folder's own
        (tmp_path / "elsewhere").mkdir()
        os.replace(path, tmp_path / "elsewhere" / "d")
        os.symlink(tmp_path / "elsewhere" / "d", path)
    with pytest.warns(UserWarning, match=f"the test file .*{words}"):
        assert read_derived(path, "the test file") is None
    if damage != "folder":  # a folder is not unlinked: it is said, and the caller goes on
        assert not os.path.lexists(path)


def test_the_check_runs_once_per_process_for_one_identity(tmp_path):
    path = str(tmp_path / "d")
    write_derived(path, lambda f: f.write(b"payload"))
    assert read_derived(path, "the test file") == b"payload"
    assert len(derived._verified) == 1
    write_derived(path, lambda f: f.write(b"another"))  # a new inode: checked again
    assert read_derived(path, "the test file") == b"another"
    assert len(derived._verified) == 2


def test_a_failed_write_leaves_no_temporary_and_keeps_the_old_file(tmp_path):
    path = str(tmp_path / "d")
    write_derived(path, lambda f: f.write(b"old"))

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_derived(path, fail)
    assert os.listdir(tmp_path) == ["d"]
    assert read_derived(path, "the test file") == b"old"


WRITER = textwrap.dedent(
    """
    import sys, time
    from tpufeed.storage.derived import write_derived
    def slow(f):
        f.write(b"x" * 1000)
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
    write_derived(sys.argv[1], slow)
    """
)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_a_killed_writers_temporary_is_removed_and_a_live_ones_kept(tmp_path):
    path = str(tmp_path / "d")
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline() == b"writing\n"
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        names = sorted(os.listdir(tmp_path))
        assert len(names) == 2 and all(".tmp-" in n for n in names)
        assert remove_dead_temporaries(str(tmp_path)) == 1
        (left,) = os.listdir(tmp_path)
        assert f"-{procs[1].pid}-" in left
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert remove_dead_temporaries(str(tmp_path)) == 1
    assert os.listdir(tmp_path) == []


def test_temporaries_of_other_hosts_and_foreign_names_are_kept(tmp_path):
    mine = temporary_name(str(tmp_path / "a"))
    assert f"-{os.getpid()}-" in mine
    for name in ["b.tmp-otherhost-1-2-abcd", "c.tmp-whatever", "plain"]:
        (tmp_path / name).write_bytes(b"")
    open(mine, "wb").close()
    assert remove_dead_temporaries(str(tmp_path)) == 0  # this process lives: its file stays
    assert len(os.listdir(tmp_path)) == 4


def test_a_reused_pid_is_not_taken_for_the_writer(tmp_path):
    """A writer's temporary names its start time too: another process that now has its pid
    (here: this one, with a made-up start time) does not keep it."""
    host = os.uname().nodename
    (tmp_path / f"a.tmp-{host}-{os.getpid()}-1-abcd").write_bytes(b"")
    assert remove_dead_temporaries(str(tmp_path)) == 1


def test_remove_dead_temporaries_goes_down_folders_when_asked(tmp_path):
    (tmp_path / "sub").mkdir()
    host = os.uname().nodename
    (tmp_path / "sub" / f"a.tmp-{host}-999999999-1-abcd").write_bytes(b"")
    assert remove_dead_temporaries(str(tmp_path)) == 0
    assert remove_dead_temporaries(str(tmp_path), recursive=True) == 1
    assert remove_dead_temporaries(str(tmp_path / "missing")) == 0


def test_large_payloads_are_checked_in_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(derived, "_CHECK_CHUNK", 1000)
    data = os.urandom(10_500)
    path = str(tmp_path / "d")
    write_derived(path, lambda f: f.write(data))
    assert read_derived(path, "the test file") == data
    time.sleep(0)


def test_the_sweep_once_lists_each_folder_once_per_process(tmp_path):
    host = os.uname().nodename

    def dead(name: str) -> None:  # this pid with another start time: a writer that is gone
        (tmp_path / f"{name}.tmp-{host}-{os.getpid()}-1-abcd").write_bytes(b"")

    dead("a")
    assert remove_dead_temporaries_once(str(tmp_path)) == 1
    dead("b")
    assert remove_dead_temporaries_once(str(tmp_path)) == 0  # this process swept it already
    assert remove_dead_temporaries(str(tmp_path)) == 1
