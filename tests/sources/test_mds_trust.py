"""Dataset.from_mds trusted by construction (issue 43): a decompressed copy is a derived file,
raw twins and shards are read only as pinned inside the dataset folder, decompression is
bounded by the size the index declares, and a copy a killed process left half written is
removed.

Every shard is MosaicML Streaming's own MDSWriter's (tests/data/mds/, tests/data/mds/trust/:
see write_fixtures.py and write_trust_fixtures.py there).
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import cloudpickle
import pytest

import tpufeed
from tests.sources.mds_data import (
    DATA,
    EXPECTED,
    TRUST_EXPECTED,
    assert_like_streaming,
    copy_of,
    edit_index,
)
from tpufeed.errors import CorruptDataError, SourceError, TpufeedError
from tpufeed.sources.mds import copies as mds_copies
from tpufeed.sources.mds.source import MDSSource

TRAILER = 24  # storage.derived's: magic, payload length, CRC32C
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Decompressed copies go under tmp_path/cache/mds."""
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))


def copies(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "cache" / "mds"


def copy_for(tmp_path: pathlib.Path, shard: str) -> pathlib.Path:
    [found] = copies(tmp_path).glob(f"*-{shard}.raw")
    return found


def temporaries(tmp_path: pathlib.Path) -> list[str]:
    return sorted(p.name for p in copies(tmp_path).glob("*.tmp-*"))


def run_python(code: str, *args: str, tmp_path: pathlib.Path) -> str:
    """Runs `code` in a fresh Python that keeps its copies where this test does."""
    env = {**os.environ, "TPUFEED_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def without_twins(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of fixture folder `name` holding its compressed shards alone."""
    folder = copy_of(name, tmp_path)
    for twin in folder.glob("*.mds"):
        twin.unlink()
    return folder


def put_in_place(source: pathlib.Path, target: pathlib.Path, keep_time: bool = True) -> None:
    """`source`'s bytes as a new file (a new inode) renamed over `target`, with `target`'s
    modification time if `keep_time`."""
    before = target.stat()
    staged = target.with_name(target.name + ".staged")
    shutil.copyfile(source, staged)
    os.replace(staged, target)
    if keep_time:
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))


# --- the decompressed copy: a derived file --------------------------------------------------

MAKE_COPIES = "import sys, tpufeed; list(tpufeed.Dataset.from_mds(sys.argv[1]))"


@pytest.mark.multiprocess
@pytest.mark.parametrize("damage", ["flip", "flip_trailer", "cut", "cut_trailer", "fifo"])
def test_a_bad_copy_is_removed_with_a_warning_and_made_again(tmp_path, damage):
    """A copy an earlier run left (made in another process), then damaged: found bad on its
    first use here, removed with a warning, made again; the records are Streaming's."""
    folder = copy_of("zstd", tmp_path)
    run_python(MAKE_COPIES, str(folder), tmp_path=tmp_path)
    copy = copy_for(tmp_path, "shard.00002.mds.zstd")
    data = bytearray(copy.read_bytes())
    if damage == "flip":  # a byte of the last sample's vec (float32): silent if unchecked
        data[-TRAILER - 3] ^= 0x40
    elif damage == "flip_trailer":
        data[-5] ^= 0x01
    elif damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "cut_trailer":
        data = data[:-TRAILER]
    if damage == "fifo":
        copy.unlink()
        os.mkfifo(copy)
    else:
        copy.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"the decompressed copy of \S*shard\.00002\.mds\.zstd"):
        records = list(tpufeed.Dataset.from_mds(folder))
    assert_like_streaming(records, EXPECTED["zstd"])
    raw_size = json.loads((folder / "index.json").read_text())["shards"][2]["raw_data"]["bytes"]
    assert copy_for(tmp_path, "shard.00002.mds.zstd").stat().st_size == raw_size + TRAILER
    assert not temporaries(tmp_path)


def test_a_copy_is_named_by_the_shards_whole_identity(tmp_path):
    """A shard replaced by another of the same size and modification time (a new inode, as a
    rewrite of the dataset in place leaves it) is read anew: its own records, never the old
    shard's copy."""
    folder = without_twins("trust/twins-a", tmp_path)
    other = without_twins("trust/twins-b", tmp_path)
    assert_like_streaming(list(tpufeed.Dataset.from_mds(folder)), TRUST_EXPECTED["twins-a"])
    shards = sorted(p.name for p in folder.glob("shard.*"))
    stamps = [(folder / n).stat() for n in shards]
    for name in [*shards, "index.json"]:
        put_in_place(other / name, folder / name)
    for name, before in zip(shards, stamps):
        now = (folder / name).stat()
        assert (now.st_size, now.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
        assert now.st_ino != before.st_ino
    assert_like_streaming(list(tpufeed.Dataset.from_mds(folder)), TRUST_EXPECTED["twins-b"])
    assert len(list(copies(tmp_path).glob("*.raw"))) == 2 * len(shards)


def test_a_shard_replaced_under_its_index_is_refused_not_served_from_the_old_copy(tmp_path):
    folder = without_twins("trust/twins-a", tmp_path)
    other = without_twins("trust/twins-b", tmp_path)
    list(tpufeed.Dataset.from_mds(folder))
    put_in_place(other / "shard.00001.mds.zstd", folder / "shard.00001.mds.zstd")
    source = MDSSource(folder)
    assert source[0]["id"] == 0
    with pytest.raises(CorruptDataError, match=r"shard\.00001\.mds\.zstd: its xxh3_64 is"):
        source[3]


def test_a_copy_held_by_a_stopped_writer_is_made_here_after_the_bound(tmp_path, monkeypatch):
    """Another process holding a copy's lock (stopped, or hung) holds up a reader at most
    LOCK_WAIT_S; then this process makes the copy itself."""
    monkeypatch.setattr(mds_copies, "LOCK_WAIT_S", 0.3)
    folder = copy_of("zstd", tmp_path)
    source = MDSSource(folder)
    shard = source.files[0]
    copies(tmp_path).mkdir(parents=True)
    lock = os.path.join(copies(tmp_path), f"{_copy_name(shard)}.lock")
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another open file description: as another process
        started = time.monotonic()
        with pytest.warns(UserWarning, match=r"another process has held it for 0.3 s"):
            record = source[0]
        assert time.monotonic() - started < 10
    assert record["id"] == 0


def _copy_name(shard) -> str:
    from tpufeed.storage.derived import derived_name

    return derived_name(shard.path, shard.pinned, ".raw")


# --- the raw twin and the shards: pinned, inside the dataset folder -------------------------


@pytest.mark.parametrize("how", ["rename", "symlink"])
def test_a_twin_replaced_after_it_was_opened_is_never_read(tmp_path, how):
    """The raw twin Streaming leaves beside a compressed shard is pinned when first read: a
    process that opens it again (a worker, an unpickled source) refuses another file."""
    folder = copy_of("trust/twins-a", tmp_path)
    other = copy_of("trust/twins-b", tmp_path)
    source = MDSSource(folder)
    assert source[0]["id"] == 0  # the twin, checked against its hash, pinned
    twin = folder / "shard.00000.mds"
    if how == "rename":
        put_in_place(other / "shard.00000.mds", twin)
    else:  # a link, inside the folder, to another file of the same size
        shutil.copyfile(other / "shard.00000.mds", folder / "elsewhere.mds")
        twin.unlink()
        twin.symlink_to("elsewhere.mds")
    again = cloudpickle.loads(cloudpickle.dumps(source))  # as a worker gets it
    with pytest.raises(CorruptDataError, match=r"shard\.00000\.mds changed since it was first"):
        again[1]
    assert source[1]["id"] == 1  # this process reads on from the file it checked


@pytest.mark.multiprocess
def test_workers_forked_after_a_twin_was_replaced_refuse_it(tmp_path):
    folder = copy_of("trust/twins-a", tmp_path)
    other = copy_of("trust/twins-b", tmp_path)
    ds = tpufeed.Dataset.from_mds(folder)
    assert ds.source[0]["id"] == 0  # the twin, checked and pinned in this process
    put_in_place(other / "shard.00000.mds", folder / "shard.00000.mds")
    with pytest.raises(TpufeedError, match=r"shard\.00000\.mds changed since it was first"):
        list(ds.workers(2, isolate=True))  # every record read in a forked worker


@pytest.mark.parametrize("when", ["before open", "after open"])
@pytest.mark.parametrize("which", ["twin", "shard"])
def test_a_file_linked_out_of_the_dataset_folder_is_refused(tmp_path, when, which):
    """A link from a shard, or from a raw twin, to a file outside the dataset folder is never
    followed, even to the very bytes it held: when the dataset is opened, and when a link is
    put in its place after that."""
    folder = copy_of("trust/twins-a" if which == "twin" else "nested/part-a", tmp_path)
    source = MDSSource(folder) if when == "after open" else None
    target = folder / "shard.00000.mds"
    outside = tmp_path / "outside.mds"
    shutil.copyfile(target, outside)
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(CorruptDataError, match="outside the dataset root"):
        (source or MDSSource(folder))[0]


# --- decompression: bounded, streamed to disk, never whole in memory -------------------------

PEAK = """
import json, sys
import tpufeed
from tpufeed.errors import CorruptDataError

def kib(field):  # of this process's memory, from the kernel's own account
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

source = tpufeed.Dataset.from_mds(sys.argv[1]).source
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from now: not the parent's, inherited at exec
before = kib("VmRSS")
try:
    outcome = {"id": int(source[int(sys.argv[2])]["id"])}
except CorruptDataError as error:
    outcome = {"error": str(error)}
outcome["growth"] = (kib("VmHWM") - before) * 1024
print(json.dumps(outcome))
"""


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("algorithm", ["zstd", "gz", "bz2"])
def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path, algorithm):
    """A shard whose 64 MiB decompress from a few KiB, declared 64 KiB raw by its index: the
    stream stops one 1 MiB piece past the declared size; peak RSS grows by under 32 MiB (it
    grew by the whole output before), and nothing is left in the copies folder."""
    folder = copy_of(f"trust/big-{algorithm}", tmp_path)
    edit_index(folder, lambda i: i["shards"][0]["raw_data"].update(bytes=64 << 10))
    outcome = json.loads(run_python(PEAK, str(folder), "0", tmp_path=tmp_path))
    assert "decompresses to more than the 65,536 bytes declared" in outcome["error"]
    assert f"shard.00000.mds.{algorithm}" in outcome["error"]
    assert outcome["growth"] < 32 * MiB, outcome
    assert not [p.name for p in copies(tmp_path).glob("*") if not p.name.endswith(".lock")]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_large_shard_is_decompressed_to_disk_in_bounded_memory(tmp_path):
    folder = copy_of("trust/big-zstd", tmp_path)
    outcome = json.loads(run_python(PEAK, str(folder), "63", tmp_path=tmp_path))
    assert outcome["id"] == 63
    assert outcome["growth"] < 32 * MiB, outcome  # 64 MiB raw; a 1 MiB sample read
    copy = copy_for(tmp_path, "shard.00000.mds.zstd")
    index = json.loads((folder / "index.json").read_text())
    assert copy.stat().st_size == index["shards"][0]["raw_data"]["bytes"] + TRAILER


KILLED_WHILE_WRITING = "import sys, tpufeed; tpufeed.Dataset.from_mds(sys.argv[1]).source[0]"


def kill_while_writing(folder: pathlib.Path, tmp_path: pathlib.Path) -> bool:
    """Starts a process that makes the copy of `folder`'s shard and SIGKILLs it while its
    temporary file is there; False if it was done before it could be caught."""
    env = {**os.environ, "TPUFEED_CACHE_DIR": str(tmp_path / "cache")}
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_WRITING, str(folder)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not temporaries(tmp_path):
            if writer.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
    return writer.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_copy_half_written_by_a_killed_process_is_removed_and_made_again(tmp_path):
    folder = copy_of("trust/big-zstd", tmp_path)
    for _ in range(5):  # the write takes a fraction of a second: catch it inside
        if kill_while_writing(folder, tmp_path):
            break
        shutil.rmtree(copies(tmp_path))
    else:
        pytest.fail("the writer was never caught while writing its copy")
    assert temporaries(tmp_path) and not list(copies(tmp_path).glob("*.raw"))
    source = MDSSource(folder)  # opening the dataset removes the dead writer's temporary
    assert not temporaries(tmp_path)
    assert [source[i]["id"] for i in (0, 31, 63)] == [0, 31, 63]
    assert source[63]["zeros"] == bytes(MiB)
    assert len(list(copies(tmp_path).glob("*.raw"))) == 1 and not temporaries(tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (mounting needs root), for the copies folder."""
    path = tmp_path / "small"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.fail(f"a full disk needs a small tmpfs, and it could not be mounted: {mounted}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_copy_that_does_not_fit_on_disk_is_named_and_leaves_nothing(small_disk, monkeypatch):
    """64 MiB to decompress into a 1 MiB disk: a `SourceError` naming the copy and the shard,
    no temporary left; the copy fits once there is room."""
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(small_disk))
    source = MDSSource(DATA / "trust" / "big-zstd")
    with pytest.raises(SourceError, match=r"shard\.00000\.mds\.zstd cannot be written: .*No space"):
        source[0]
    assert [p.name for p in (small_disk / "mds").iterdir() if not p.name.endswith(".lock")] == []
