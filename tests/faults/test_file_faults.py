"""The one fault suite, over the files a dataset is made of: every format of
tests/faults/formats.py (ArrayRecord, TFRecord, Parquet, WebDataset, MDS, built datasets) and
every file it opens (shards, raw twins, `index.json`, `manifest.json`), each changed in every way
tests/faults/file_changes.py knows.

Every case ends in the records written or in a `tpufeed` error naming the file, within
`CASE_S`, leaving no temporary file, no process and no file open (`file_changes.no_leftovers`).
A file changed after the dataset was opened is never read as the new file: a reader that opens
it again (a worker, given the source pickled, or a real worker process) raises, naming it; one
that reads on may give the records it opened. A file changed before an open is refused (a FIFO,
a link out of the dataset's folder) or read anew (another file of the same size and time:
derived files made from the old one are not reused). MDS decompression bombs stay within their
declared size. Cuts and byte flips of each format's headers are the parser fuzz's
(tests/faults/test_parsers_fuzz.py); derived files, tests/faults/test_derived_faults.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from tests.faults.derived_kinds import DERIVED
from tests.faults.file_changes import CHANGES, no_leftovers, outcome, same_size_and_time
from tests.faults.formats import FORMATS, MDS_DATA, Format

CASE_S = 60  # one test: every file of one format, each change a few milliseconds
pytestmark = pytest.mark.timeout(CASE_S)

AFTER_OPEN = [
    (name, change)
    for name in sorted(FORMATS)
    for change in CHANGES
    if change != "symlink out" or FORMATS[name].rooted
]
BEFORE_OPEN = [
    (name, change)
    for name in sorted(FORMATS)
    for change in ("fifo", "symlink out")
    if change != "symlink out" or FORMATS[name].rooted
]


@pytest.fixture(autouse=True)
def _leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))  # the fallback folders
    yield from no_leftovers(tmp_path)


def written(fmt: Format, folder: Path, variant: str = "a") -> list[str]:
    """The files of the dataset `fmt` writes into `folder` (not the derived files its writer
    leaves beside them, ArrayRecord's record maps: tests/faults/test_derived_faults.py's)."""
    folder.mkdir(parents=True, exist_ok=True)
    fmt.write(folder, variant)
    return sorted(n for n in os.listdir(folder) if not n.endswith(".tpufeed-index"))


def contents(paths: list[Path]) -> set[tuple[str, bytes]]:
    return {(path.name, path.read_bytes()) for path in paths}


def read_in_worker(pickled: bytes) -> list[Any]:
    """Every record of a source pickled as workers get it: its files opened anew."""
    source = cloudpickle.loads(pickled)
    return [source[i] for i in range(len(source))]


def change_one(case: Path, name: str, change: str, other: Path) -> None:
    """Changes file `name` of the dataset in `case`/ds (into `other`'s file of that name)."""
    target = case / "outside" if change == "symlink out" else other / name
    CHANGES[change](case / "ds" / name, target)


def changed_after_open(
    fmt: Format, case: Path, file: str, change: str, other: Path, read_first: bool
) -> dict[str, tuple[str, str]]:
    """How this process and a worker read the dataset once `file` changed after the open."""
    expected = fmt.records("a")
    written(fmt, case / "ds")
    ds = fmt.open(case / "ds", case / "derived")
    if read_first:
        assert fmt.comparable(list(ds)) == expected
    pickled = cloudpickle.dumps(ds.source)  # as workers get it, before the change
    change_one(case, file, change, other)
    return {
        "this process": outcome(lambda: fmt.comparable(list(ds)), expected, file),
        "a worker": outcome(lambda: fmt.comparable(read_in_worker(pickled)), expected, file),
    }


@pytest.mark.parametrize("read_first", [False, True], ids=["opened", "read"])
@pytest.mark.parametrize("name, change", AFTER_OPEN)
def test_a_file_changed_after_open_is_never_read_as_the_new_file(
    tmp_path, name, change, read_first
):
    """Opened, then one file changed: this process and a worker (which opens the files again)
    raise naming it, unless they read no records from it (an index read at open, a compressed
    shard beside its raw twin). Opened and read through once (`read`), then changed: this
    process reads on from what it opened, a worker raises naming the file or reads the records
    opened (from a derived copy of the pinned file, say)."""
    fmt = FORMATS[name]
    written(fmt, tmp_path / "b", "b")
    bad = {}
    for file in written(fmt, tmp_path / "probe"):
        case = tmp_path / f"case-{file}"
        found = changed_after_open(fmt, case, file, change, tmp_path / "b", read_first)
        strict = fmt.reread(file) and not read_first
        for reader, (result, detail) in found.items():
            allowed = {"named"} if strict else {"right", "named"}
            if result not in allowed:
                bad[file, reader] = (result, detail)
    assert not bad, f"{name}, {change}: {bad}"


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_worker_processes_refuse_a_file_replaced_after_open(tmp_path, name):
    """The same, in real worker processes (forked by the fork server, which open every file
    again): each file a worker reads records from, replaced by another of the same size and
    time after the open, fails the run naming it; no worker outlives it."""
    fmt = FORMATS[name]
    written(fmt, tmp_path / "b", "b")
    file = next(f for f in written(fmt, tmp_path / "probe") if fmt.reread(f))
    written(fmt, tmp_path / "ds")
    ds = fmt.open(tmp_path / "ds", tmp_path / "derived")
    same_size_and_time(tmp_path / "ds" / file, tmp_path / "b" / file)
    read = lambda: fmt.comparable(list(ds.workers(2, isolate=True)))  # noqa: E731
    result = outcome(read, fmt.records("a"), file)
    assert result[0] == "named", result


def changed_before_open(fmt: Format, case: Path, file: str, change: str) -> tuple[str, str]:
    written(fmt, case / "ds")
    change_one(case, file, change, case / "ds")
    read = lambda: fmt.comparable(list(fmt.open(case / "ds", case / "derived")))  # noqa: E731
    return outcome(read, fmt.records("a"), file)


@pytest.mark.parametrize("name, change", BEFORE_OPEN)
def test_a_file_changed_before_open_is_refused_by_name(tmp_path, name, change):
    """A FIFO in place of any file a dataset opens, or a link out of its folder: refused,
    naming the file, never blocking on it."""
    fmt = FORMATS[name]
    results = {
        file: changed_before_open(fmt, tmp_path / f"case-{file}", file, change)
        for file in written(fmt, tmp_path / "probe")
    }
    bad = {file: result for file, result in results.items() if result[0] != "named"}
    assert not bad, f"{name}, {change}: {bad}"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_files_replaced_by_others_of_the_same_size_and_time_are_read_anew(tmp_path, name):
    """Every file replaced by another of the same size and modification time (a new inode, as a
    dataset rewritten in place leaves it), once the derived files of the old ones exist: a new
    open reads the new records, never an index or a copy of the old files; the pipeline
    opened before reads on the old records or raises naming a file."""
    fmt = FORMATS[name]
    folder, derived = tmp_path / "ds", tmp_path / "derived"
    files = written(fmt, folder)
    written(fmt, tmp_path / "b", "b")
    before = fmt.open(folder, derived)
    assert fmt.comparable(list(before)) == fmt.records("a")
    made = [kind for kind in DERIVED.values() if kind.format == name and kind.opens is None]
    old = {kind.name: contents(kind.find(folder, derived)) for kind in made}
    assert all(old.values()), f"no derived files were made: {old}"
    for file in files:
        same_size_and_time(folder / file, tmp_path / "b" / file)
    again = fmt.open(folder, derived)
    assert fmt.comparable(list(again)) == fmt.records("b")
    for kind in made:  # new files, or the old names holding other bytes
        now = contents(kind.find(folder, derived))
        if kind.remade:
            assert now - old[kind.name], f"{kind.name} reused"
        else:  # the writer's record maps, left beside files replaced by other means: each
            # is dropped at its first mismatching read (a read falls back to the checked path
            # for the rest of its batch), so once every file was read through, those kept are
            # the new files' own (a file of the same bytes)
            for _ in files:
                assert fmt.comparable(list(again)) == fmt.records("b")
            now = contents(kind.find(folder, derived))
            own = contents(kind.find(tmp_path / "b", derived))
            assert now <= own, f"{kind.name} kept, though not the files' own"
    result = outcome(lambda: fmt.comparable(list(before)), fmt.records("a"), "")
    assert result[0] in ("right", "named"), result


PEAK = """
import json, sys
import tpufeed
from tpufeed.errors import CorruptDataError

def kib(field):  # this process's memory, from the kernel's own account
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

source = tpufeed.Dataset.from_mds(sys.argv[1], cache_dir=sys.argv[2]).source
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) counts from here
before = kib("VmRSS")
try:
    outcome = {"records": len([source[i] for i in range(len(source))])}
except CorruptDataError as error:
    outcome = {"error": str(error)}
outcome["growth"] = (kib("VmHWM") - before) * 1024
print(json.dumps(outcome))
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("algorithm", ["zstd", "gz", "bz2"])
def test_a_decompression_bomb_is_refused_within_its_declared_size(tmp_path, algorithm):
    """An MDS shard that decompresses to 64 MiB from a few KiB (MDSWriter's), its index made to
    declare 64 KiB: refused by name one 1 MiB piece past the declared size; the process grows
    by under 16 MiB; no copy and no temporary are left."""
    folder = tmp_path / "ds"
    folder.mkdir()
    for path in (MDS_DATA / "trust" / f"big-{algorithm}").iterdir():
        folder.joinpath(path.name).write_bytes(path.read_bytes())
    index = json.loads((folder / "index.json").read_text())
    index["shards"][0]["raw_data"]["bytes"] = 64 << 10
    (folder / "index.json").write_text(json.dumps(index))
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(folder), str(tmp_path / "derived")],
        capture_output=True,
        text=True,
        timeout=CASE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert "decompresses to more than the 65,536 bytes declared" in result.get("error", ""), result
    assert f"shard.00000.mds.{algorithm}" in result["error"]
    assert result["growth"] < 16 << 20, result
    copies = tmp_path / "derived" / "mds"
    assert not [p.name for p in copies.iterdir() if not p.name.endswith(".lock")]
