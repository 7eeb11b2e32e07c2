"""The build under faults, with real processes: Ctrl-C and SIGKILL at points of a rebuild, a
Beam worker process killed, a full disk, and a reader holding the old dataset during the
switch. Whatever happens, the output holds a whole dataset (the old one until the new one is
complete), and a rerun into the same output gives the shards a clean build gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tests.processes import default_ctrl_c
from tpufeed.beam import BuildConfig, build
from tpufeed.errors import CorruptDataError, SourceError

_OLD, _NEW = 30, 120


def _write_inputs(tmp_path) -> None:
    with open(tmp_path / "old.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "old": True}) + "\n" for i in range(_OLD))
    with open(tmp_path / "new.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "text": "n" * i}) + "\n" for i in range(_NEW))
    # Marks each record it sees, and blocks on the record named by the file `block_at`
    # (touching `blocked` first): a signal then lands at a known point of the build.
    (tmp_path / "mark.py").write_text(
        "import os, pathlib, time\n"
        "HERE = pathlib.Path(__file__).parent\n"
        "def mark(r):\n"
        "    (HERE / 'pids').mkdir(exist_ok=True)\n"
        "    (HERE / 'pids' / str(os.getpid())).touch()\n"
        "    at = HERE / 'block_at'\n"
        "    if at.exists() and r['id'] == int(at.read_text()):\n"
        "        (HERE / 'blocked').touch()\n"
        "        time.sleep(120)\n"
        "    return r\n"
    )


def _files(root) -> dict[str, bytes]:
    return {n: (root / n).read_bytes() for n in sorted(os.listdir(root))}


def _ids(root) -> list[int]:
    source = tpufeed.Dataset.open(root, verify=True).source
    return [int(r["id"]) for r in source.__getitems__(range(len(source)))]


def _old_dataset(tmp_path) -> dict[str, bytes]:
    _write_inputs(tmp_path)
    build(BuildConfig(inputs=(str(tmp_path / "old.jsonl"),), output=str(tmp_path / "ds")))
    return _files(tmp_path / "ds")


def _new_build_command(*extra: str) -> list[str]:
    return [
        sys.executable,
        "-P",
        "-m",
        "tpufeed.cli",
        "build",
        "--input",
        "new.jsonl",
        "--output",
        "ds",
        "--num-shards",
        "4",
        "--transform",
        "mark.py:mark",
        "--overwrite",
        "-q",
        *extra,
    ]


def _start(tmp_path, *extra: str, preexec=default_ctrl_c) -> subprocess.Popen:
    return subprocess.Popen(
        _new_build_command(*extra),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )


def _background_job() -> None:
    """`preexec_fn` for a build started as a shell's background job (`tpufeed build ... &`):
    Ctrl-C ignored, so SIGTERM is how it is stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# How a build stopped by a signal ends: its exit status and its one line.
_STOPPED = {
    signal.SIGINT: (130, "tpufeed: interrupted: the build was stopped: ds is as it was (the "),
    signal.SIGTERM: (143, "tpufeed: terminated: the build was stopped: ds is as it was (the "),
}


def _wait_for(path, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if proc.poll() is not None:
            pytest.fail(f"the build ended ({proc.returncode}) first: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path} never appeared")
        time.sleep(0.02)


def _clean_rerun_matches_a_fresh_build(tmp_path) -> None:
    """A rerun into the same output works and gives the shards of a build into a new folder."""
    (tmp_path / "block_at").unlink(missing_ok=True)
    rerun = subprocess.run(
        _new_build_command(), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    build(
        BuildConfig(
            inputs=(str(tmp_path / "new.jsonl"),),
            output=str(tmp_path / "fresh"),
            num_shards=4,
            transforms=(f"{tmp_path / 'mark.py'}:mark",),
        )
    )
    fresh, rebuilt = _files(tmp_path / "fresh"), _files(tmp_path / "ds")
    manifest = json.loads(rebuilt.pop("manifest.json"))
    assert {n: b for n, b in fresh.items() if n != "manifest.json"} == rebuilt
    assert manifest["shards"] == json.loads(fresh["manifest.json"])["shards"]
    assert _ids(tmp_path / "ds") == list(range(_NEW))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "sig, at",
    [
        (signal.SIGINT, 1),  # before any record is through the pipeline (record 0 is run
        # through the transforms first, to learn the schema)
        (signal.SIGINT, _NEW - 1),  # every other record read, transformed and spilled
        (signal.SIGTERM, 1),  # taken as Ctrl-C is, in a background job that ignores Ctrl-C
        (signal.SIGTERM, _NEW - 1),
        (signal.SIGKILL, _NEW - 1),  # no chance to clean up
    ],
)
def test_a_stopped_rebuild_leaves_the_old_dataset_whole_and_a_rerun_works(tmp_path, sig, at):
    old = _old_dataset(tmp_path)
    (tmp_path / "block_at").write_text(str(at))
    proc = _start(tmp_path, preexec=_background_job if sig == signal.SIGTERM else default_ctrl_c)
    try:
        _wait_for(tmp_path / "blocked", proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert _files(tmp_path / "ds") == old  # every file as it was, and nothing added
    assert _ids(tmp_path / "ds") == list(range(_OLD))
    staging = [n for n in os.listdir(tmp_path) if ".tpufeed-build-" in n]
    if sig in _STOPPED:
        code, line = _STOPPED[sig]
        assert proc.returncode == code, err
        assert err.splitlines()[-1] == line + "new dataset's files were removed)"
        assert staging == []
    else:
        assert proc.returncode == -signal.SIGKILL and len(staging) <= 1  # not cleaned up
    _clean_rerun_matches_a_fresh_build(tmp_path)
    # A killed build's folder stays (another build may be running); the rerun warns of it.
    assert [n for n in os.listdir(tmp_path) if ".tpufeed-build-" in n] == staging


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_ctrl_c_while_shards_are_written_leaves_one_whole_dataset(tmp_path):
    """A Ctrl-C as the first shard lands in the staging folder: it may stop the build, or
    land after the switch. Either way the output is one whole dataset, never a mix."""
    old = _old_dataset(tmp_path)
    proc = _start(tmp_path)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            staged = [n for n in os.listdir(tmp_path) if ".tpufeed-build-" in n]
            if staged and any(
                n.endswith(".array_record") for n in os.listdir(tmp_path / staged[0])
            ):
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    if proc.returncode == 130:
        assert _files(tmp_path / "ds") == old
    else:
        assert proc.returncode == 0, err
        assert _ids(tmp_path / "ds") == list(range(_NEW))
    assert [n for n in os.listdir(tmp_path) if ".tpufeed-build-" in n] == []


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_a_killed_beam_worker_fails_the_build_by_name_and_keeps_the_old_dataset(tmp_path):
    old = _old_dataset(tmp_path)
    (tmp_path / "block_at").write_text("5")
    proc = _start(tmp_path, "--workers", "2")
    try:
        _wait_for(tmp_path / "blocked", proc)
        victim = max((tmp_path / "pids").iterdir(), key=os.path.getmtime).name
        os.kill(int(victim), signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    # Beam's own threads print what they saw first; tpufeed's line comes last.
    assert err.splitlines()[-1] == (
        "tpufeed: error: the build into ds failed: a Beam worker process ended in the middle "
        "of its work; ds is as it was (the new dataset's files were removed). Run the build "
        "again; if a worker keeps dying, give it more memory or use fewer --workers"
    ), err
    assert _files(tmp_path / "ds") == old
    assert [n for n in os.listdir(tmp_path) if ".tpufeed-build-" in n] == []
    for pid in os.listdir(tmp_path / "pids"):  # no worker outlives the build
        assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == "zombie"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_on_workers_prints_one_line_and_leaves_no_process(tmp_path, sig):
    """Ctrl-C in a terminal signals the build's whole process group, its Beam workers too (as
    does a service manager's SIGTERM): stderr is the one line, not their threads' tracebacks,
    and no process outlives it."""
    old = _old_dataset(tmp_path)
    (tmp_path / "block_at").write_text("5")
    proc = subprocess.Popen(
        _new_build_command("--workers", "2"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
        start_new_session=True,  # its own group, as a terminal gives a command
    )
    try:
        _wait_for(tmp_path / "blocked", proc)  # a worker is in the middle of a bundle
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        time.sleep(0.5)
        # A zombie has ended: one whose parent exited first waits for this container's init.
        left = [
            p.info
            for p in psutil.process_iter(["pid", "cmdline", "status"])
            if _session(p) == proc.pid and p.info["status"] != psutil.STATUS_ZOMBIE
        ]
    finally:
        proc.kill()
    code, line = _STOPPED[sig]
    assert proc.returncode == code, err
    assert err.splitlines() == [line + "new dataset's files were removed)"]
    assert left == []
    assert _files(tmp_path / "ds") == old


def _session(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except OSError:  # gone since it was listed
        return None


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (mounting needs root)."""
    path = tmp_path / "small"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr!r}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.slow
def test_a_full_disk_fails_by_name_and_leaves_the_output_as_it_was(tmp_path, small_disk):
    _write_inputs(tmp_path)
    out = small_disk / "ds"
    build(BuildConfig(inputs=(str(tmp_path / "old.jsonl"),), output=str(out)))
    old = _files(out)
    used = os.statvfs(small_disk)
    with open(tmp_path / "big.jsonl", "w") as f:  # ~2 MB of incompressible text: no room
        f.writelines(
            json.dumps({"id": i, "hex": os.urandom(4000).hex()}) + "\n" for i in range(250)
        )
    with pytest.raises(SourceError, match="No space left on device") as failure:
        build(BuildConfig(inputs=(str(tmp_path / "big.jsonl"),), output=str(out), overwrite=True))
    assert f"the build into {out} failed at " in str(failure.value)
    assert f"{out} is as it was (the new dataset's files were removed)" in str(failure.value)
    assert _files(out) == old and _ids(out) == list(range(_OLD))
    assert sorted(os.listdir(small_disk)) == ["ds"]  # no staging folder or temporary left
    assert os.statvfs(small_disk).f_bfree == used.f_bfree  # their space is back


def test_a_reader_of_the_old_dataset_keeps_its_open_shards_and_refuses_a_replaced_one(tmp_path):
    _write_inputs(tmp_path)
    out = tmp_path / "ds"
    config = dict(inputs=(str(tmp_path / "old.jsonl"),), output=str(out), num_shards=3)
    build(BuildConfig(**config))
    source = tpufeed.Dataset.open(out).source
    assert [int(r["id"]) for r in source.__getitems__(range(5))] == list(range(5))  # shard 0
    build(BuildConfig(**dict(config, inputs=(str(tmp_path / "new.jsonl"),)), overwrite=True))
    rest = source.__getitems__(range(5, 10))  # shard 0 is open: the old file, still whole
    assert [(int(r["id"]), bool(r["old"])) for r in rest] == [(i, True) for i in range(5, 10)]
    with pytest.raises(
        CorruptDataError,
        match=r"data-00001-of-00003\.array_record record 0 cannot be read: .*changed since it "
        "was first opened: it is another file now",
    ):
        source.__getitems__([10])  # not opened before the switch: the new file, refused
    assert _ids(out) == list(range(_NEW))
