"""The one fault suite, over derived files: every kind of tests/faults/derived_kinds.py (tar and
TFRecord indexes, beside a built dataset's shards too, MDS decompressed copies, record-cache
entries, the shard cache's copies and facts over gs://, its copies over s3://, https:// and
hf://), made by a first read, then damaged, swapped, starved of disk or cut short by a SIGKILL.

A derived file that is bad in any way is never read as good: it is removed with a warning and
made again (or, for a full disk, the pipeline goes on without it or raises naming it), and the
records are always the source's own. Each case ends within `CASE_S`, leaving no temporary file
and no process.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.faults.derived_kinds import DERIVED, DerivedKind
from tests.faults.file_changes import (
    fill,
    full_disk,
    left_behind,
    no_leftovers,
    outcome,
    same_size_and_time,
    symlink_out,
    temporaries,
)
from tests.faults.formats import FORMATS
from tpufeed.storage import derived as derived_files
from tpufeed.storage.cache import readahead

CASE_S = 60
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(CASE_S)

KINDS = [
    pytest.param(name, marks=[pytest.mark.emulator] if kind.store else [], id=name)
    for name, kind in DERIVED.items()
]
MADE_BY_READS = [param for param in KINDS if DERIVED[param.values[0]].remade]


class Place:
    """Where a case keeps its dataset (a folder, and for kinds over a store its objects too)
    and the derived files of `kind`."""

    def __init__(self, kind: DerivedKind, tmp: Path, upload: Any = None, bucket: str = ""):
        self.kind, self.format = kind, FORMATS[kind.format]
        self.folder, self.derived = tmp / "ds", tmp / "derived"
        self.upload, self.bucket = upload, bucket
        self.location = f"{kind.store}://{bucket}/ds" if upload else str(self.folder)

    def publish(self, variant: str) -> None:
        """Writes the dataset of `variant`; over one already there, each file another of the
        same size and modification time (a new inode; in a store, a new generation or ETag)."""
        if not self.folder.exists() or not any(self.folder.iterdir()):
            self.folder.mkdir(parents=True, exist_ok=True)
            self.format.write(self.folder, variant)
        else:
            fresh = self.folder.parent / f"fresh-{variant}"
            fresh.mkdir()
            self.format.write(fresh, variant)
            for path in sorted(fresh.iterdir()):
                same_size_and_time(self.folder / path.name, path)
        if self.upload:
            for path in sorted(self.folder.iterdir()):
                self.upload(self.bucket, f"ds/{path.name}", str(path))

    def read(self) -> list[Any]:
        return self.format.comparable(list(self.kind.open(self.location, self.derived)))

    def files(self) -> list[Path]:
        return self.kind.find(self.folder, self.derived)


@pytest.fixture
def place(request, tmp_path) -> Place:
    kind = DERIVED[request.param]
    if not kind.store:
        return Place(kind, tmp_path)
    if kind.store == "hf":  # a dataset repository of the test Hub, one commit a file put
        hub = request.getfixturevalue("hub")
        hub.create("org/faults")

        def commit(repo: str, name: str, path: str) -> None:
            hub.commit(repo.removeprefix("datasets/"), {name: Path(path).read_bytes()})

        return Place(kind, tmp_path, commit, "datasets/org/faults")
    if kind.store == "http":  # files of the test web server, under a folder of its own
        web, folder = request.getfixturevalue("web"), request.getfixturevalue("web_bucket")
        put = request.getfixturevalue("web_upload")
        host = web.url.removeprefix("http://")
        return Place(
            kind, tmp_path, lambda _, name, path: put(folder, name, path), f"{host}/files/{folder}"
        )
    prefix = "" if kind.store == "gs" else "s3_"
    request.getfixturevalue("gcs" if kind.store == "gs" else "s3")
    upload = request.getfixturevalue(f"{prefix}upload")
    return Place(kind, tmp_path, upload, request.getfixturevalue(f"{prefix}bucket"))


@pytest.fixture(autouse=True)
def _leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))  # the fallback folders
    # A read-ahead's threads (and the copies their source holds open) end after 1 s idle by
    # default: sooner here, so that the check that no file stays open need not wait for them.
    monkeypatch.setattr(readahead, "_IDLE_EXIT_S", 0.1)
    yield from no_leftovers(tmp_path)


@pytest.fixture
def new_process(monkeypatch):
    """What a new process knows: no derived file checked yet."""
    monkeypatch.setattr(derived_files, "_verified", set())


def warned(caught: list[warnings.WarningMessage], records: list[logging.LogRecord]) -> str:
    """What the warnings and the log said (an unclosed file's `ResourceWarning` aside)."""
    said = [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)]
    return "\n".join(said + [r.getMessage() for r in records if r.levelno >= logging.WARNING])


def damage(path: Path, how: str, outside: Path) -> None:
    data = path.read_bytes()
    if how == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif how == "symlink out":  # to its very bytes, in a folder not its own
        symlink_out(path, outside)
    elif how == "flipped":
        path.write_bytes(
            data[: len(data) // 2]
            + bytes([data[len(data) // 2] ^ 0x10])
            + data[len(data) // 2 + 1 :]
        )
    elif how == "cut":
        path.write_bytes(data[: len(data) // 2])
    else:  # emptied
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["fifo", "symlink out", "flipped", "cut", "empty"])
@pytest.mark.parametrize("place", KINDS, indirect=True)
def test_a_bad_derived_file_is_made_again_with_a_warning(place, how, tmp_path, caplog, new_process):
    """Or, for a kind the read does not make (`remade`), removed with a warning."""
    place.publish("a")
    assert place.read() == place.format.records("a")
    files = place.files()
    assert files, f"{place.kind.name}: no derived file was made"
    for path in files:
        damage(path, how, tmp_path / "outside")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        assert place.read() == place.format.records("a")
    said = warned(caught, caplog.records)
    for path in files:
        assert path.name in said or not place.kind.warns, f"no warning names {path.name}:\n{said}"
        if place.kind.remade:
            assert path.is_file() and not path.is_symlink(), f"{path} was not made again"
        else:
            assert not os.path.lexists(path), f"{path} was not removed"
    caplog.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert place.read() == place.format.records("a")
    assert not warned(caught, caplog.records), "made again, still found bad"


@pytest.mark.parametrize("place", KINDS, indirect=True)
def test_a_source_replaced_by_another_of_the_same_size_and_time_is_read_anew(place):
    """The derived files of the old source are never reused for the new one."""
    place.publish("a")
    assert place.read() == place.format.records("a")
    place.publish("b")
    assert place.read() == place.format.records("b")


@pytest.mark.parametrize("place", MADE_BY_READS, indirect=True)
def test_a_full_disk_gives_the_records_or_a_named_error_and_leaves_no_temporary(
    place, caplog, monkeypatch
):
    """The folder of the derived files on a small tmpfs filled to its last byte (for files kept
    beside the dataset, the dataset's folder): the records, with a warning, or a named error."""
    disk = place.folder if place.kind.beside else place.derived
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(disk / "cache"))  # no room there either
    with full_disk(disk), caplog.at_level(logging.WARNING):
        place.publish("a")
        fill(disk)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = outcome(place.read, place.format.records("a"), "")
        assert result[0] in ("right", "named"), result
        if result[0] == "right":
            assert "No space left" in warned(caught, caplog.records), "no warning said why"
        else:
            assert "No space left" in result[1] or "space" in result[1], result
        assert not left_behind(disk)


def mid_write(place: Place) -> subprocess.Popen[str]:
    """A process reading `place`, stopped in the middle of a derived file's write."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.killed_writer", place.kind.name, place.location]
        + [str(place.derived)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with selectors.DefaultSelector() as selector:  # epoll: any descriptor number
        selector.register(proc.stdout, selectors.EVENT_READ)
        ready = selector.select(CASE_S / 2)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("mid-write"):
        proc.kill()
        _, err = proc.communicate(timeout=CASE_S / 2)
        pytest.fail(f"the writer never reached a derived file's write: {line!r}\n{err[-3000:]}")
    return proc


@pytest.mark.multiprocess
@pytest.mark.parametrize("place", MADE_BY_READS, indirect=True)
def test_a_writer_killed_mid_write_leaves_nothing_once_run_again(place, tmp_path):
    place.publish("a")
    proc = mid_write(place)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=CASE_S / 2)
    assert proc.returncode == -signal.SIGKILL
    assert temporaries(tmp_path), "the killed write left no temporary: it was not mid-write"
    assert place.read() == place.format.records("a")
    assert not left_behind(tmp_path)
    assert place.read() == place.format.records("a")
