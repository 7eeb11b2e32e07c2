"""A WebDataset shard's sample index is a derived file: keyed by the tar's whole identity
(device and inode included), checked by its CRC32C on first use, and made again, with a
warning, when it is damaged, cut, a FIFO or a link out of its folder. The tar itself is the
file first opened, or a named error. A writer killed in the middle of an index leaves nothing
behind once tpufeed runs again."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tpufeed
from tests.sources.tar_damage import samples, write_shard
from tpufeed.errors import CorruptDataError
from tpufeed.sources.webdataset import tar as tar_module
from tpufeed.sources.webdataset.tar import TarShard
from tpufeed.storage import derived
from tpufeed.storage.derived import temporary_name

PLACES = ["beside the shard", "index_dir"]


@pytest.fixture(autouse=True)
def fresh_process_check(monkeypatch):
    """Each case sees what a new process sees: no derived file checked yet."""
    monkeypatch.setattr(derived, "_verified", set())


@pytest.fixture
def scans(monkeypatch) -> list[str]:
    """The shards whose headers were scanned (the real scan, counted)."""
    calls: list[str] = []
    real = tar_module.scan_tar

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(tar_module, "scan_tar", counting)
    return calls


def _index_dir(tmp_path, place: str):
    return tmp_path / "indexes" if place == "index_dir" else None


def _keys(shard: TarShard) -> list[str]:
    return [s["__key__"] for s in shard.read(np.arange(len(shard)))]


def _expected(prefix: str, count: int = 12) -> list[str]:
    return [s["__key__"] for s in samples(prefix, count)]


@pytest.mark.parametrize("place", PLACES)
def test_a_tar_replaced_by_one_of_the_same_size_and_mtime_is_indexed_again(tmp_path, place):
    path = write_shard(tmp_path / "train-000.tar", "a")
    index_dir = _index_dir(tmp_path, place)
    assert _keys(TarShard(path, index_dir)) == _expected("a")
    before = os.stat(path)
    other = write_shard(tmp_path / "other.tar", "b")  # same sizes, other keys and bytes
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, path)
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ino != before.st_ino
    shard = TarShard(path, index_dir)
    assert _keys(shard) == _expected("b")
    assert shard.read(np.array([3]))[0]["txt"] == "text 0003 of b"


def _damage(index_path: str, how: str, outside: str) -> None:
    if how == "byte flipped":
        with open(index_path, "r+b") as f:
            f.seek(os.path.getsize(index_path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
    elif how == "cut":
        os.truncate(index_path, os.path.getsize(index_path) - 30)
    elif how == "empty":
        os.truncate(index_path, 0)
    elif how == "fifo":
        os.remove(index_path)
        os.mkfifo(index_path)
    else:  # a link to a whole index, but out of the index's own folder
        shutil.copyfile(index_path, outside)
        os.remove(index_path)
        os.symlink(outside, index_path)


@pytest.mark.timeout(60)  # a FIFO opened for reading would block until then
@pytest.mark.parametrize("how", ["byte flipped", "cut", "empty", "fifo", "link out"])
@pytest.mark.parametrize("place", PLACES)
def test_a_bad_index_is_removed_with_a_warning_and_made_again(
    tmp_path, tmp_path_factory, scans, place, how
):
    path = write_shard(tmp_path / "train-000.tar", "a")
    index_dir = _index_dir(tmp_path, place)
    first = TarShard(path, index_dir)
    assert first.index_path is not None and os.path.isfile(first.index_path)
    _damage(first.index_path, how, str(tmp_path_factory.mktemp("elsewhere") / "index"))
    with pytest.warns(UserWarning, match=r"the tar index of .*train-000.tar .*made again"):
        again = TarShard(path, index_dir)
    assert _keys(again) == _expected("a")
    assert scans == [path, path]
    assert again.index_path == first.index_path and os.path.isfile(again.index_path)
    assert not os.path.islink(again.index_path)
    assert len(TarShard(path, index_dir)) == 12 and scans == [path, path]  # whole again


@pytest.mark.parametrize("place", PLACES)
def test_an_index_is_read_once_built_and_names_the_tar_identity(tmp_path, scans, place):
    path = write_shard(tmp_path / "train-000.tar", "a")
    index_dir = _index_dir(tmp_path, place)
    first = TarShard(path, index_dir)
    second = TarShard(path, index_dir)
    assert scans == [path] and first.index_path == second.index_path
    if place == "index_dir":
        name = derived.derived_name(path, second.pinned, ".wds.tpufeed-index")
        assert os.listdir(index_dir) == [name]
    else:
        assert second.index_path == path + ".wds.tpufeed-index"


@pytest.mark.parametrize("how", ["renamed over", "symlink"])
def test_a_tar_replaced_after_open_is_a_named_error(tmp_path, how):
    path = write_shard(tmp_path / "train-000.tar", "a")
    ds = tpufeed.Dataset.from_webdataset(path)
    copy = write_shard(tmp_path / "copy.tar", "a")  # byte for byte the same samples
    if how == "renamed over":
        os.replace(copy, path)
    else:
        os.remove(path)
        os.symlink(copy, path)
    with pytest.raises(CorruptDataError, match=r"train-000.tar changed since .*another inode"):
        ds.source[0]
    in_a_worker = pickle.loads(pickle.dumps(ds.source.files[0]))  # reopens by path
    with pytest.raises(CorruptDataError, match="another inode"):
        in_a_worker.read(np.array([0]))


def test_globs_skip_index_files_and_their_temporaries(tmp_path):
    path = write_shard(tmp_path / "train-000.tar", "a")
    TarShard(path)
    temporary = temporary_name(path + ".wds.tpufeed-index")  # a live writer's (this process)
    with open(temporary, "wb") as f:
        f.write(b"half an index")
    ds = tpufeed.Dataset.from_webdataset(str(tmp_path / "train-*"))
    assert [f.path for f in ds.source.files] == [path]


WRITER = textwrap.dedent(
    """
    import sys
    from tpufeed.sources.webdataset import index_file
    from tpufeed.sources.webdataset.tar import TarShard

    path, index_dir = sys.argv[1], sys.argv[2] or None
    shard = TarShard(path, index_dir)
    places = index_file.local_places(path, shard.pinned, index_dir)
    print("writing", flush=True)
    while True:  # the real index write, over and over: a kill lands in one
        index_file.save_index(places, shard.pinned.key(), shard.pinned.size, shard.index, path)
    """
)


def _temporaries(folder) -> list[str]:
    return [n for n in os.listdir(folder) if ".tmp-" in n]


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("place", PLACES)
def test_a_writer_killed_mid_index_leaves_no_temporary_after_a_rerun(tmp_path, place):
    path = write_shard(tmp_path / "train-000.tar", "a", count=1000)
    index_dir = _index_dir(tmp_path, place)
    folder = index_dir or tmp_path
    for _ in range(10):  # until a kill lands inside a write (almost always the first)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, str(index_dir or "")], stdout=subprocess.PIPE
        )
        assert writer.stdout.readline() == b"writing\n"
        deadline = time.monotonic() + 10
        while not _temporaries(folder) and time.monotonic() < deadline:
            pass  # killed as soon as a temporary is seen: in the middle of its write
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
        writer.stdout.close()
        if _temporaries(folder):
            break
    assert _temporaries(folder), "no kill landed inside an index write"
    shard = TarShard(path, index_dir)
    assert _keys(shard) == _expected("a", 1000)
    assert _temporaries(folder) == []
