"""`cache()`: every epoch of a cached pipeline is the uncached pipeline's, item for item, with
0 or 2 workers and on resume; each record is made once; what it refuses, and why.

The source is real ArrayRecord files; the stage before the cache logs each call to a file, so
that the records made are counted across worker processes.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.array_record import write_array_records
from tpufeed.storage.record_cache import RecordFiles

RECORDS = 24


@pytest.fixture
def paths(tmp_path) -> list[str]:
    out = []
    for i in range(2):
        out.append(str(tmp_path / f"part-{i}.array_record"))
        write_array_records(out[-1], [b"%d" % r for r in range(i * 12, i * 12 + 12)])
    return out


def decoder(log: str, scale: float = 1.0):
    def decode(data: bytes) -> dict:
        with open(log, "a") as f:
            f.write(data.decode() + "\n")
        value = int(data)
        return {
            "image": (np.arange(12, dtype=np.float32) * value * scale).reshape(3, 4),
            "label": value,
            "name": b"r%d" % value,
            "weight": np.float32(value / 2),
        }

    return decode


def augment(element: dict, rng: np.random.Generator) -> dict:
    out = dict(element)
    out["image"] = element["image"] + rng.random((3, 4), dtype=np.float32)
    out["flip"] = int(rng.integers(2))
    return out


def pipelines(paths, tmp_path, cache: bool = True, max_bytes: int = 1 << 30, scale=1.0):
    log = str(tmp_path / "made.log")
    ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=7).map(decoder(log, scale))
    if cache:
        ds = ds.cache(str(tmp_path / "cache"), max_bytes=max_bytes)
    return ds.random_map(augment).batch(5).repeat(3)


def made(tmp_path) -> list[int]:
    path = tmp_path / "made.log"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 2])
def test_every_epoch_is_the_uncached_pipelines_and_each_record_is_made_once(
    paths, tmp_path, workers
):
    want = list(pipelines(paths, tmp_path, cache=False))
    os.remove(tmp_path / "made.log")
    got = list(pipelines(paths, tmp_path).workers(workers))
    assert_same(got, want)
    assert sorted(made(tmp_path)) == list(range(RECORDS))  # epochs 2 and 3 read entries
    again = list(pipelines(paths, tmp_path).workers(workers))  # a new job: a warm cache
    assert_same(again, want)
    assert len(made(tmp_path)) == RECORDS


@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_taken_mid_epoch_resumes_with_or_without_the_cache(paths, tmp_path, workers):
    want = list(pipelines(paths, tmp_path, cache=False))
    cached = pipelines(paths, tmp_path).workers(workers)
    it = iter(cached)
    for _ in range(7):  # into the second epoch (5 batches an epoch)
        next(it)
    state = it.get_state()
    it.close()
    assert_same(list(cached.iterator(state)), want[7:])
    assert_same(list(pipelines(paths, tmp_path, cache=False).iterator(state)), want[7:])
    uncached_state = iter(pipelines(paths, tmp_path, cache=False)).get_state()
    assert_same(list(cached.iterator(uncached_state)), want)
    assert cached.fingerprint() == pipelines(paths, tmp_path, cache=False).fingerprint()


def test_flat_map_and_filter_before_the_cache_keep_their_pieces(paths, tmp_path):
    def pipeline(cache: bool):
        ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=3).map(int)
        ds = ds.filter(lambda v: v % 5 != 0).flat_map(lambda v: [v] * (v % 3))
        if cache:
            ds = ds.cache(str(tmp_path / "cache"), max_bytes=1 << 20)
        return ds.random_map(lambda v, rng: (v, float(rng.random()))).repeat(2)

    want = list(pipeline(False))
    assert list(pipeline(True)) == want
    it = iter(pipeline(True))
    for _ in range(len(want) // 2 + 1):
        next(it)
    assert list(pipeline(True).iterator(it.get_state())) == want[len(want) // 2 + 1 :]


def test_what_does_not_fit_is_made_again_and_the_limit_holds(paths, tmp_path):
    want = list(pipelines(paths, tmp_path, cache=False))
    os.remove(tmp_path / "made.log")
    limit = 2500  # room for some of the 24 entries (about 300 bytes each)
    assert_same(list(pipelines(paths, tmp_path, max_bytes=limit)), want)
    entries = [
        os.path.join(root, name)
        for root, _, names in os.walk(tmp_path / "cache")
        for name in names
        if name.isdigit()
    ]
    assert 0 < len(entries) < RECORDS
    assert sum(os.path.getsize(path) for path in entries) <= limit
    assert len(made(tmp_path)) == len(entries) + 3 * (RECORDS - len(entries))  # 3 epochs


def test_a_damaged_entry_is_made_again_with_a_warning(paths, tmp_path, caplog):
    want = list(pipelines(paths, tmp_path, cache=False))
    list(pipelines(paths, tmp_path))
    (entry,) = [
        os.path.join(root, "5") for root, _, names in os.walk(tmp_path / "cache") if "5" in names
    ]
    with open(entry, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = len(made(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tpufeed.cache"):
        assert_same(list(pipelines(paths, tmp_path)), want)
    assert "record 5" in caplog.text and "CRC32C" in caplog.text
    assert made(tmp_path)[before:] == [5]  # made again once, then read from its new entry


def test_another_function_or_source_makes_new_entries(paths, tmp_path):
    list(pipelines(paths, tmp_path))
    list(pipelines(paths, tmp_path, scale=2.0))  # a constant the function closes over
    assert len(made(tmp_path)) == 2 * RECORDS
    scaled = list(pipelines(paths, tmp_path, cache=False, scale=2.0))
    assert_same(list(pipelines(paths, tmp_path, scale=2.0)), scaled)
    write_array_records(paths[0], [b"%d" % (r + 100) for r in range(12)])  # the data changed
    got = list(pipelines(paths, tmp_path))
    assert_same(got, list(pipelines(paths, tmp_path, cache=False)))
    assert {int(label) for batch in got for label in batch["label"]} >= {100, 111}


def test_values_keep_their_types(tmp_path):
    rows = [b"a", "b", 3, 2.5, True, np.arange(3), np.int16(4), {"k": np.float64(1.5)}]
    ds = tpufeed.Dataset.from_sequence(rows).cache(str(tmp_path), max_bytes=1 << 20)
    for _ in range(2):
        got = list(ds)
        for a, b in zip(got[:5], rows):
            assert type(a) is type(b) and a == b
        assert np.array_equal(got[5], rows[5]) and got[5].flags.writeable
        assert type(got[6]) is np.int16 and got[6] == 4
        assert type(got[7]["k"]) is np.float64


def test_a_value_the_codec_cannot_store_is_named(tmp_path):
    ds = tpufeed.Dataset.from_sequence([1, 2]).map(lambda v: (v, v))
    with pytest.raises(InvalidArgumentError, match=r"record 0: .*a dict instead of a tuple"):
        list(ds.cache(str(tmp_path), max_bytes=1 << 20))


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda ds: ds.random_map(lambda v, rng: v), "random_map.*new numbers every epoch"),
        (lambda ds: ds.batch(2), "batch.*before pack and batch"),
        (lambda ds: ds.pack({"t": 4}), "pack.*before pack and batch"),
        (lambda ds: ds.cache("/tmp/x", 10), "cache: a pipeline caches once"),
    ],
)
def test_cache_after_a_stage_it_cannot_replay_is_refused(make, why):
    ds = make(tpufeed.Dataset.from_sequence([1, 2]))
    with pytest.raises(InvalidArgumentError, match=f"cache\\(\\) cannot come after {why}"):
        ds.cache("/tmp/x", max_bytes=10)


@pytest.mark.parametrize("directory, max_bytes", [(None, 10), ("/tmp/x", 0), ("/tmp/x", "1G")])
def test_bad_settings_are_named(directory, max_bytes):
    with pytest.raises(InvalidArgumentError, match=repr(max_bytes) if directory else "None"):
        tpufeed.Dataset.from_sequence([1]).cache(directory, max_bytes=max_bytes)


def test_a_mixture_is_cached_in_its_components(tmp_path):
    a = tpufeed.Dataset.from_sequence([1, 2])
    with pytest.raises(InvalidArgumentError, match="each component of a mixture"):
        tpufeed.Dataset.mix([a, a]).cache(str(tmp_path), max_bytes=10)


def test_a_record_that_fails_before_the_cache_is_skipped_every_epoch_and_never_stored(
    paths, tmp_path
):
    def pipeline(cache: bool):
        log = str(tmp_path / "made.log")
        decode = decoder(log)

        def fussy(data: bytes) -> dict:
            if data == b"3":
                raise ValueError("record 3 is bad")
            return decode(data)

        ds = tpufeed.Dataset.from_array_record(paths).map(fussy)
        if cache:
            ds = ds.cache(str(tmp_path / "cache"), max_bytes=1 << 20)
        return ds.random_map(augment).ignore_errors(5).repeat(2)

    want = list(pipeline(False))
    it = iter(pipeline(True))
    got = list(it)
    assert it.stats().errors == 2  # once an epoch
    assert len(got) == len(want) == 2 * (RECORDS - 1)
    for a, b in zip(got, want):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_indexing_element_spec_and_len_are_the_uncached_pipelines(paths, tmp_path):
    def pipeline(cache: bool):
        ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=2).map(decoder(os.devnull))
        if cache:
            ds = ds.cache(str(tmp_path / "cache"), max_bytes=1 << 20)
        return ds.random_map(augment).repeat(2)

    cached, plain = pipeline(True), pipeline(False)
    assert len(cached) == len(plain) == 2 * RECORDS  # every epoch counted
    assert cached.element_spec == plain.element_spec
    for i in (0, 5, RECORDS + 3):
        for _ in range(2):  # the second time from the entry
            a, b = cached[i], plain[i]
            assert all(np.array_equal(a[k], b[k]) for k in b)


# -- what the key covers: the code, the values it reads, the user's modules; key= ----------------

HELPERS = """
import numpy as np

SCALE = 2
TABLE = {"bias": 1}
WEIGHTS = np.array([0.5, 0.25])


def offset(v):
    return v + TABLE["bias"]
"""

PIPELINE = """
import os

import numpy as np

import helpers
from helpers import WEIGHTS

SHIFT = 0


def decode(data):
    with open(os.environ["MADE_LOG"], "a") as f:
        f.write(data.decode() + "\\n")
    value = helpers.offset(int(data)) * helpers.SCALE + SHIFT
    return {"value": np.float64(value) * WEIGHTS}
"""

RUN = """
import json, os, sys
import numpy as np
import tpufeed
folder, cache = sys.argv[1], sys.argv[2]
sys.path.insert(0, folder)
sys.dont_write_bytecode = True
import pipeline
paths = sys.argv[3:]

def values(ds):
    return [e["value"].tolist() for e in ds]

ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=4).map(pipeline.decode)
cached = values(ds.cache(cache, max_bytes=1 << 30).repeat(2))
os.environ["MADE_LOG"] = os.devnull
print(json.dumps([cached, values(ds.repeat(2))]))
"""


def run_pipeline(tmp_path, paths) -> tuple[list, int]:
    """One run of the cached pipeline in a fresh process: its output (checked against the
    uncached pipeline's) and how many records it made."""
    before = len(made(tmp_path))
    env = dict(os.environ, MADE_LOG=str(tmp_path / "made.log"))
    code = tmp_path / "code"
    args = [sys.executable, "-c", RUN, str(code), str(tmp_path / "cache"), *paths]
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    cached, plain = json.loads(out.stdout)
    assert cached == plain
    return cached, len(made(tmp_path)) - before


@pytest.mark.slow
@pytest.mark.multiprocess
def test_an_edited_value_or_helper_in_the_users_modules_makes_new_entries(paths, tmp_path):
    """Each run a new process importing the user's modules as they are on disk."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "helpers.py").write_text(HELPERS)
    (code / "pipeline.py").write_text(PIPELINE)
    first, count = run_pipeline(tmp_path, paths)
    assert count == RECORDS  # the first epoch made them, the second read them
    assert run_pipeline(tmp_path, paths) == (first, 0)  # the same code: every entry replayed
    edits = [
        ("helpers.py", "SCALE = 2", "SCALE = 3"),  # a constant read as helpers.SCALE
        ("helpers.py", '{"bias": 1}', '{"bias": 5}'),  # a dict a helper function reads
        ("helpers.py", "[0.5, 0.25]", "[0.5, 0.75]"),  # an array imported by name
        ("helpers.py", 'return v + TABLE["bias"]', 'return v - TABLE["bias"]'),  # its code
        ("pipeline.py", "SHIFT = 0", "SHIFT = 1"),  # a constant of the stage's own module
    ]
    outputs = [first]
    for name, old, new in edits:
        text = (code / name).read_text()
        assert old in text
        (code / name).write_text(text.replace(old, new))
        output, count = run_pipeline(tmp_path, paths)
        assert count == RECORDS, (name, new)
        assert output not in outputs, (name, new)
        outputs.append(output)
    assert run_pipeline(tmp_path, paths) == (outputs[-1], 0)


_LOCK = threading.Lock()


def locked_decode(data: bytes) -> int:
    with _LOCK:
        return int(data)


def test_a_global_with_no_stable_form_is_refused_when_the_pipeline_is_built(tmp_path):
    ds = tpufeed.Dataset.from_sequence([b"1", b"2"]).map(locked_decode)
    with pytest.raises(InvalidArgumentError) as caught:
        ds.cache(str(tmp_path), max_bytes=1 << 20)
    for words in ("map(locked_decode)", "test_cache.locked_decode", "_LOCK", "lock", 'key="'):
        assert words in str(caught.value), words
    assert list(ds.cache(str(tmp_path), max_bytes=1 << 20, key="v1")) == [1, 2]


def test_key_stands_for_the_code(paths, tmp_path):
    """With key= the code is not followed: the same key replays, a new key makes entries."""

    def pipeline(scale: float, key: str):
        ds = tpufeed.Dataset.from_array_record(paths).map(
            decoder(str(tmp_path / "made.log"), scale)
        )
        return ds.cache(str(tmp_path / "cache"), max_bytes=1 << 30, key=key)

    def labels(ds) -> list[float]:
        return [float(e["image"][0, 1]) for e in ds]

    one = labels(pipeline(1.0, "v1"))
    assert labels(pipeline(2.0, "v1")) == one  # the user said the code is the same
    assert len(made(tmp_path)) == RECORDS
    assert labels(pipeline(2.0, "v2")) == [2 * v for v in one]
    assert len(made(tmp_path)) == 2 * RECORDS


@pytest.mark.parametrize("key", ["", 3, b"v1", ["v1"]])
def test_a_bad_key_is_named(key):
    with pytest.raises(InvalidArgumentError, match=f"cache key must be a non-empty str.*{key!r}"):
        tpufeed.Dataset.from_sequence([1]).cache("/tmp/x", max_bytes=10, key=key)


# -- entries as derived files: the source's whole identity, the opener, a full disk, SIGKILL -------


def test_a_shard_replaced_by_another_file_of_the_same_size_and_time_makes_new_entries(
    paths, tmp_path
):
    list(pipelines(paths, tmp_path))
    st = os.stat(paths[0])
    replacement = str(tmp_path / "replacement")
    write_array_records(replacement, [b"%d" % (r + 50) for r in range(12)])
    assert os.path.getsize(replacement) == st.st_size
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, paths[0])  # another inode, the same name, size and time
    before = len(made(tmp_path))
    got = list(pipelines(paths, tmp_path))
    assert len(made(tmp_path)) - before == RECORDS  # new entries, read in epochs 2 and 3
    assert_same(got, list(pipelines(paths, tmp_path, cache=False)))
    assert {int(label) for batch in got for label in batch["label"]} >= {50, 61}


@pytest.mark.timeout(60)
def test_a_fifo_in_place_of_an_entry_is_made_again_with_a_warning(paths, tmp_path, caplog):
    want = list(pipelines(paths, tmp_path, cache=False))
    list(pipelines(paths, tmp_path))
    (entry,) = [
        os.path.join(root, "5") for root, _, names in os.walk(tmp_path / "cache") if "5" in names
    ]
    os.remove(entry)
    os.mkfifo(entry)
    before = len(made(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tpufeed.cache"):
        assert_same(list(pipelines(paths, tmp_path)), want)  # never blocks on the FIFO
    assert "record 5" in caplog.text and "FIFO" in caplog.text
    assert made(tmp_path)[before:] == [5]
    assert stat.S_ISREG(os.lstat(entry).st_mode)  # made again as an entry


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (mounting needs root), for the cache directory."""
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


def big_decoder(data: bytes) -> dict:
    value = int(data)
    return {"pixels": np.full(60_000, value, np.float32), "label": value}


def test_a_full_disk_goes_on_uncached_with_a_warning_and_leaves_no_temporary(
    paths, small_disk, caplog
):
    """24 entries of 240 KB for a 1 MiB disk, with max_bytes far larger: some fit, the write
    that does not fit is removed, and every epoch is still the uncached pipeline's."""

    def pipeline(cache: bool):
        ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=1).map(big_decoder)
        if cache:
            ds = ds.cache(str(small_disk / "cache"), max_bytes=1 << 30)
        return ds.random_map(augment_pixels).batch(4).repeat(2)

    with caplog.at_level(logging.WARNING, logger="tpufeed.cache"):
        assert_same(list(pipeline(True)), list(pipeline(False)))
    assert "No space left on device" in caplog.text and "uncached" in caplog.text
    files = [os.path.join(r, n) for r, _, names in os.walk(small_disk) for n in names]
    assert not [f for f in files if ".tmp-" in f]
    entries = [f for f in files if os.path.basename(f).isdigit()]
    assert 0 < len(entries) < RECORDS
    usage = RecordFiles(str(small_disk / "cache"), "probe", 1 << 30).usage()
    assert usage == sum(os.path.getsize(f) for f in entries)  # the room of failed writes back


def augment_pixels(element: dict, rng: np.random.Generator) -> dict:
    return {**element, "pixels": element["pixels"] + np.float32(rng.random())}


KILLED = """
import os, sys
sys.path.insert(0, sys.argv[1])
import slow_pipeline
slow_pipeline.run(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
"""

SLOW_PIPELINE = """
import numpy as np
import tpufeed

def decode(data):
    return {"pixels": np.full(1 << 20, int(data), np.float32)}  # 4 MiB entries: slow writes

def pipeline(cache, paths):
    return tpufeed.Dataset.from_array_record(paths).map(decode).cache(cache, max_bytes=LIMIT)

LIMIT = 60 << 20  # room for 14 of the 24 entries

def run(cache, workers, paths):
    for _ in pipeline(cache, paths).repeat(2).workers(workers):
        pass
"""


def stop(procs: list[psutil.Process]) -> None:
    """SIGSTOP each, and wait until all are stopped (the signal lands a little later)."""
    for proc in procs:
        proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    for proc in procs:
        while proc.is_running() and proc.status() not in (psutil.STATUS_STOPPED, "zombie"):
            assert time.monotonic() < deadline, f"{proc} did not stop"
            time.sleep(0.001)


def temporaries(folder) -> list[str]:
    return [n for _, _, names in os.walk(folder) for n in names if ".tmp-" in n]


def kill_while_writing(proc: subprocess.Popen, folder) -> None:
    """SIGKILLs the job `proc` started (it and every process under it, together) while an
    entry's temporary file is there: all stopped (SIGSTOP) the moment one is seen, killed if it
    is still there, let go on otherwise; returns once every one of them is gone."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if [n for n in temporaries(folder) if not n.startswith("writing")]:
            top = psutil.Process(proc.pid)
            job = [top, *top.children(recursive=True)]
            stop(job)
            if [n for n in temporaries(folder) if not n.startswith("writing")]:
                for each in job:
                    each.send_signal(signal.SIGKILL)
                proc.wait(10)
                psutil.wait_procs(job, timeout=10)
                return
            for each in job:
                each.send_signal(signal.SIGCONT)
    proc.kill()
    pytest.fail("the job was never seen in the middle of writing an entry")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_job_killed_in_the_middle_of_an_entry_leaves_nothing_after_the_rerun(
    paths, tmp_path, monkeypatch, workers
):
    code, cache = tmp_path / "code", tmp_path / "cache"
    code.mkdir()
    (code / "slow_pipeline.py").write_text(SLOW_PIPELINE)
    args = [sys.executable, "-c", KILLED, str(code), str(cache), str(workers), *paths]
    kill_while_writing(subprocess.Popen(args), cache)
    left = temporaries(cache)
    assert [n for n in left if n.startswith("writing")] and len(left) >= 2  # marker, entry

    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(sys.modules, "slow_pipeline", raising=False)
    import slow_pipeline

    rerun = slow_pipeline.pipeline(str(cache), paths)
    want = [
        e["pixels"][0] for e in tpufeed.Dataset.from_array_record(paths).map(slow_pipeline.decode)
    ]
    assert [e["pixels"][0] for e in rerun.repeat(2)] == want * 2
    assert temporaries(cache) == []
    entries = [os.path.join(r, n) for r, _, names in os.walk(cache) for n in names if n.isdigit()]
    usage = RecordFiles(str(cache), "probe", 1).usage()
    assert usage == sum(os.path.getsize(f) for f in entries) <= slow_pipeline.LIMIT
    assert len(entries) == 14
