"""The shard cache at its edges: disk use within `cache_bytes`, a full disk, a bad directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

import tpufeed
from tests.gcs_emulator import upload_shards
from tpufeed.errors import InvalidArgumentError, SourceError
from tpufeed.storage.cache import space as cache_space
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.stores.gcs import list_objects

RECORDS = 150  # ~100 KiB of records per shard: a 192 KiB ArrayRecord file


def disk_used(root: str) -> int:
    """Disk the shard copies under `root` take now, in allocated blocks: files under shards/ and
    evicted/, and files unlinked from there that this process or its children still hold open."""
    seen: dict[tuple[int, int], int] = {}
    folders = [os.path.join(root, sub) for sub in ("shards", "evicted")]
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    me = psutil.Process()
    for pid in [me.pid] + [p.pid for p in me.children(recursive=True)]:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if not any(target.startswith(folder + os.sep) for folder in folders):
                    continue
                st = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values())


class DiskWatch:
    """Samples `disk_used` in a thread until stopped; `peak` is the largest sample.

    Each sample is taken under the cache's global lock: no room is reserved meanwhile, so files
    freed and files growing during one sample cannot add up to more than was there at once."""

    def __init__(self, cache: ShardCache):
        self.cache = cache
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.cache.space.global_lock():
                used = disk_used(self.cache.root)
            self.peak = max(self.peak, used)
            self.samples += 1
            time.sleep(0.002)


def _dataset(url: str, cache_dir, cache_bytes: int, file_format: str) -> tpufeed.Dataset:
    if file_format == "array_record":
        return tpufeed.Dataset.from_array_record(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
    return tpufeed.Dataset.from_tfrecord(url, cache_dir=cache_dir, cache_bytes=cache_bytes)


@pytest.mark.emulator
@pytest.mark.parametrize(
    "file_format,workers", [("array_record", 0), ("array_record", 2), ("tfrecord", 0)]
)
def test_disk_used_by_a_streaming_epoch_stays_within_cache_bytes(
    gcs, bucket, upload, tmp_path, file_format, workers
):
    url, records = upload_shards(upload, bucket, "w", 8, RECORDS, file_format)
    shard_bytes = max(o.size for o in list_objects(url))
    limit = 3 * shard_bytes  # 8 shards; a window of 2 needs 2 or 3 at a time
    cache_dir = str(tmp_path / "c")
    ds = (
        _dataset(url, cache_dir, limit, file_format)
        .shuffle(seed=5, window=2)
        .batch(1)
        .prefetch(2)
        .workers(workers)
    )
    with DiskWatch(ShardCache(cache_dir, limit)) as watch:
        got = [bytes(b[0]) for b in ds]
    assert sorted(got) == sorted(records)
    assert watch.samples > 20
    assert 0 < watch.peak <= limit, f"peak {watch.peak:,} bytes on disk, limit {limit:,}"


@pytest.mark.emulator
def test_an_evicted_copy_still_open_counts_until_its_reader_closes_it(
    gcs, bucket, upload, tmp_path
):
    url, _ = upload_shards(upload, bucket, "open", 3, RECORDS)
    a, b, c = list_objects(url)
    room = ShardCache(tmp_path / "c", 0).footprint(a.size)  # room for one shard
    cache = ShardCache(tmp_path / "c", room)
    arrived = threading.Event()

    def read(obj):
        with ShardCache(tmp_path / "c", room).pinned(obj):  # another handle: another reader
            arrived.set()

    with cache.pinned(a) as path:
        copy = open(path, "rb")
        hold = cache.hold(a)  # no way to ask this reader to close: it must be closed by hand
    reader = threading.Thread(target=read, args=(b,))
    reader.start()
    assert not arrived.wait(0.5)  # a is evicted, but open: its space is not free yet
    assert not os.path.exists(cache.data_path(a)) and len(os.listdir(cache.layout.evicted)) == 1
    assert copy.read(4) and disk_used(cache.root) <= room
    copy.close()
    hold.close()
    assert arrived.wait(10)
    reader.join()
    assert os.listdir(cache.layout.evicted) == [] and disk_used(cache.root) == room

    # A reader that can close its copy is asked to, as soon as the copy is evicted.
    with cache.pinned(b) as path:
        copy = open(path, "rb")
        hold = cache.hold(b, on_evicted=lambda: (copy.close(), hold.close()))
    arrived.clear()
    read(c)
    assert arrived.is_set() and copy.closed and hold.closed
    assert disk_used(cache.root) == room and cache.usage() == room


@pytest.mark.emulator
@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_across_more_shards_than_fit_is_read_within_the_limit(
    gcs, bucket, upload, tmp_path, workers
):
    url, records = upload_shards(upload, bucket, "wide", 3, RECORDS)
    room = ShardCache(tmp_path / "c", 0).footprint(max(o.size for o in list_objects(url)))
    ds = tpufeed.Dataset.from_array_record(url, cache_dir=tmp_path / "c", cache_bytes=2 * room)
    with DiskWatch(ShardCache(tmp_path / "c", 2 * room)) as watch:
        batches = list(ds.batch(3 * RECORDS).repeat(2).workers(workers))  # all 3 in each batch
    assert [sorted(b) for b in batches] == [sorted(records)] * 2
    assert watch.peak <= 2 * room


@pytest.mark.emulator
def test_a_process_reading_more_shards_at_once_than_fit_fails_naming_the_fix(
    gcs, bucket, upload, tmp_path, monkeypatch
):
    monkeypatch.setattr(cache_space, "STUCK_S", 0.5)
    url, _ = upload_shards(upload, bucket, "two", 2, RECORDS)
    a, b = list_objects(url)
    cache = ShardCache(tmp_path / "c", ShardCache(tmp_path / "c", 0).footprint(a.size))
    with cache.pinned(a) as path:
        copy = open(path, "rb")
        hold = cache.hold(a, on_evicted=lambda: None)  # a reader that never lets go of it
    with pytest.raises(
        SourceError,
        match=rf"{b.url}: no room in the shard cache at "
        rf"{cache.root} .* this process keeps reading 1 "
        r"evicted shard\(s\) \(.*part-00000.array_record\) "
        r"while it waits for this one, so it reads more shards "
        r"at once than the cache holds; raise cache_bytes",
    ):
        with cache.pinned(b):
            pass
    copy.close()
    hold.close()
    with cache.pinned(b):  # once it is closed there is room
        pass


# -- a full, read-only or misplaced cache directory -------------------------------------------


@pytest.fixture(scope="session")
def tmpfs_ok(tmp_path_factory) -> None:
    """Skips unless this process may mount a tmpfs in a mount namespace of its own."""
    mount = tmp_path_factory.mktemp("probe")
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs")
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k none {mount}"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace: {probe.stderr.strip()}")


def run_on_tmpfs(mount, size_kib: int, script: str, *args: str, remount_ro: bool = False) -> str:
    """Runs `script` in a child that sees a fresh tmpfs of `size_kib` at `mount` (argv[1]);
    `remount_ro` makes it read-only once `mount`/c exists. Returns stdout and stderr."""
    setup = f"mount -t tmpfs -o size={size_kib}k tpufeed-test {mount} && mkdir {mount}/c"
    if remount_ro:
        setup += f" && mount -o remount,ro {mount}"
    run = 'script="$1" && shift && exec "$0" -c "$script" "$@"'  # $0: python; then its argv
    child = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f"{setup} && {run}",
            sys.executable,
            textwrap.dedent(script),
            str(mount),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return child.stdout + child.stderr


@pytest.mark.emulator
def test_a_full_disk_names_the_cache_directory_and_the_shard(
    gcs, bucket, upload, tmp_path, tmpfs_ok
):
    url, _ = upload_shards(upload, bucket, "full", 1, RECORDS)
    mount = tmp_path / "disk"
    mount.mkdir()
    out = run_on_tmpfs(
        mount,
        1024,
        """
        import os, sys
        from tpufeed.errors import SourceError
        from tpufeed.sources.array_record import ArrayRecordSource
        from tpufeed.storage.cache.shard_cache import ShardCache
        mount, url = sys.argv[1:]
        source = ArrayRecordSource(url, cache=ShardCache(os.path.join(mount, "c"), 1 << 30))
        fs = os.statvfs(mount)
        with open(os.path.join(mount, "other-data"), "wb") as f:  # someone else fills the disk
            f.write(bytes(fs.f_bavail * fs.f_frsize - 64 * 1024))
        try:
            source.__getitems__([0])
        except SourceError as e:
            print("raised", type(e).__name__, e, "| from", repr(e.__cause__))
        """,
        url,
    )
    cache_dir = mount / "c"
    assert (
        f"raised SourceError {source_url(url)}: no space left on the disk of the shard cache "
        f"at {cache_dir} while writing it" in out
    ), out
    assert "free disk space, lower cache_bytes, or point cache_dir= (or $TPUFEED_CACHE_DIR)" in out
    assert "No space left on device" in out  # the OSError it comes from


def source_url(glob: str) -> str:
    return glob.replace("part-*", "part-00000")


@pytest.mark.emulator
def test_a_read_only_cache_directory_is_named_with_the_fix(gcs, bucket, upload, tmp_path, tmpfs_ok):
    url, records = upload_shards(upload, bucket, "ro", 1, RECORDS)
    mount = tmp_path / "ro"
    mount.mkdir()
    out = run_on_tmpfs(
        mount,
        1024,
        """
        import os, sys
        import tpufeed
        from tpufeed.errors import TpufeedError
        from tpufeed.storage.cache.shard_cache import ShardCache
        mount, url = sys.argv[1:]
        cache_dir = os.path.join(mount, "c")
        for attempt in (lambda: list(tpufeed.Dataset.from_array_record(url, cache_dir=cache_dir)),
                        lambda: ShardCache(cache_dir).clear()):  # `tpufeed cache clear`
            try:
                attempt()
            except TpufeedError as e:
                print("raised", type(e).__name__, e)
        """,
        url,
        remount_ro=True,
    )
    assert (
        f"raised SourceError cannot write to the shard cache directory {mount / 'c'} "
        f"({mount / 'c' / 'tmp'}): Read-only file system; make it writable, or point "
        "cache_dir= (or $TPUFEED_CACHE_DIR) at a writable directory" in out
    ), out
    assert (
        f"raised SourceError cannot write to the shard cache directory {mount / 'c'} "
        f"({mount / 'c' / 'shards'}): Read-only file system" in out
    ), out


def test_a_cache_directory_without_write_permission_is_named_with_the_fix(tmp_path):
    cache_dir = tmp_path / "c"
    cache_dir.mkdir(mode=0o555)
    command = [
        sys.executable,
        "-c",
        textwrap.dedent("""
        import sys
        from tpufeed.errors import SourceError
        from tpufeed.storage.cache.shard_cache import ShardCache
        from tpufeed.storage.stores.gcs import GcsObject
        try:
            with ShardCache(sys.argv[1], 1 << 20).pinned(GcsObject("b", "x", 100, 1, None)):
                pass
        except SourceError as e:
            print("raised", e)
        """),
        str(cache_dir),
    ]
    if os.geteuid() == 0:  # root writes through permissions unless it gives that up
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv(1) to drop root's permission override")
        drop = "-dac_override,-dac_read_search,-fowner"
        command = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", *command]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (
        f"raised gs://b/x: cannot write to the shard cache directory {cache_dir} "
        f"({cache_dir / 'shards'}): Permission denied; make it writable, or point "
        "cache_dir= (or $TPUFEED_CACHE_DIR) at a writable directory" in out.stdout
    ), out.stdout + out.stderr


@pytest.mark.parametrize("where", ["itself", "a parent"])
def test_a_cache_directory_that_is_a_file_is_refused_naming_it(tmp_path, monkeypatch, where):
    file = tmp_path / "not-a-dir"
    file.write_text("")
    cache_dir = file if where == "itself" else file / "cache"
    message = (
        rf"the shard cache directory {cache_dir} cannot be used: {file} is a file, not a "
        r"directory; point cache_dir= \(or \$TPUFEED_CACHE_DIR\) at a directory"
    )
    with pytest.raises(InvalidArgumentError, match=message):
        ShardCache(cache_dir)
    with pytest.raises(InvalidArgumentError, match=message):
        tpufeed.Dataset.from_array_record("gs://b/x.array_record", cache_dir=cache_dir)
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(cache_dir))
    with pytest.raises(InvalidArgumentError, match=message):
        ShardCache()  # the default cache of every gs:// source


def test_usage_counts_a_copy_being_evicted_once_though_both_folders_list_it(tmp_path):
    """`usage()` reads without the cache's lock: a held copy moved to evicted/ between its two
    listings shows up in both (the same file, one inode), and must count once."""
    cache = ShardCache(str(tmp_path / "c"), 10 << 20)
    cache.layout.make_dirs()
    copy = os.path.join(cache.layout.shards, "k.data")
    with open(copy, "wb") as f:
        f.write(b"x" * 10_000)
    alone = cache.usage()
    assert alone >= 10_000
    os.link(copy, os.path.join(cache.layout.evicted, "k.evicted-1-ab"))  # mid-rename, as listed
    assert cache.usage() == alone


@pytest.mark.emulator
def test_a_cache_bigger_than_its_tiny_disk_fails_naming_the_space_and_leaves_no_bad_copy(
    gcs, bucket, upload, tmp_path, tmpfs_ok
):
    """8 shards of ~192 KiB, a 1 MiB tmpfs, cache_bytes of 1 GiB: the disk fills before the
    limit. Decided (docs/faults.md): cache_bytes is trusted, not capped by the disk; the
    error names the directory, the free space and the fix, and no copy is left half written."""
    url, _ = upload_shards(upload, bucket, "tiny", 8, RECORDS)
    mount = tmp_path / "tiny"
    mount.mkdir()
    out = run_on_tmpfs(
        mount,
        1024,
        """
        import os, sys
        import tpufeed
        from tpufeed.errors import SourceError
        from tpufeed.storage.cache.shard_cache import ShardCache
        from tpufeed.storage.stores.gcs import list_objects
        mount, url = sys.argv[1:]
        cache_dir = os.path.join(mount, "c")
        ds = tpufeed.Dataset.from_array_record(url, cache_dir=cache_dir, cache_bytes=1 << 30)
        try:
            print("read", len(list(ds.shuffle(seed=1, window=2))))
        except SourceError as e:
            print("raised", type(e).__name__, e)
        cache = ShardCache(cache_dir, 1 << 30)
        shards = os.listdir(os.path.join(cache_dir, "shards"))
        print("parts", [n for n in shards if ".part-" in n])
        for obj in list_objects(url):
            if os.path.exists(cache.data_path(obj)):
                assert cache.recheck(obj) is False, obj.url  # whole and sound
        print("sound")
        """,
        url,
    )
    assert "sound" in out and "parts []" in out, out
    assert f"no space left on the disk of the shard cache at {mount / 'c'}" in out, out
    assert "bytes free there, cache_bytes is 1,073,741,824; free disk space, lower" in out, out
