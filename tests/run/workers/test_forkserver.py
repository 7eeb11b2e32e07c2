"""Workers forked by one warm server that outlives iterators, yet started as a fresh interpreter
would be now: not from the user's script, in today's environment, directory and tpufeed."""

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import tpufeed
from tests.processes import is_fork_server, worker_processes

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]


def test_workers_are_not_forked_from_the_user_script(tmp_path):
    """A training script's top-level code (e.g. jax.distributed.initialize()) runs once."""
    marker = tmp_path / "runs"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, tpufeed
        with open({str(marker)!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        ds = tpufeed.Dataset.from_sequence(list(range(50))).map(lambda i: i * 2).batch(5).workers(2)
        assert sum(int(b.sum()) for b in ds) == 2 * sum(range(50))
    """)
    )
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)
    assert len(marker.read_text().split()) == 1


def test_asking_for_workers_starts_their_fork_server_before_the_first_batch(tmp_path):
    script = tmp_path / "ask.py"
    script.write_text(
        textwrap.dedent("""
        import time, psutil, tpufeed
        def servers():
            return [c for c in psutil.Process().children()
                    if "tpufeed.run.workers.forkserver" in " ".join(c.cmdline())]
        ds = tpufeed.Dataset.from_sequence(list(range(8))).map(lambda i: i * 2)
        ds.workers(0)
        print("after workers(0):", len(servers()), flush=True)
        ds = ds.workers(2)  # nothing iterated yet
        print("after workers(2):", len(servers()), flush=True)
        deadline = time.monotonic() + 30
        while servers()[0].name() != "tpufeed-forksrv" and time.monotonic() < deadline:
            time.sleep(0.02)
        print("named:", servers()[0].name(), flush=True)
        print("items:", list(ds), flush=True)
        print("servers:", len(servers()), flush=True)
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "after workers(0): 0",
        "after workers(2): 1",
        "named: tpufeed-forksrv",
        f"items: {[i * 2 for i in range(8)]}",
        "servers: 1",
    ], proc.stdout


def _made_by(e):
    time.sleep(0.002)
    return [os.getpid(), os.getppid()]


def test_workers_are_forked_by_one_server_that_outlives_iterators():
    ds = tpufeed.Dataset.from_sequence(list(range(600))).map(_made_by).batch(4).workers(2)
    servers = set()
    for _ in range(2):
        made = {tuple(row) for b in ds for row in b.tolist()}
        by_workers = {(pid, ppid) for pid, ppid in made if pid != os.getpid()}
        assert by_workers  # (on a loaded machine one worker may start after the work is done)
        servers |= {ppid for _, ppid in by_workers}
    assert len(servers) == 1  # both iterators' workers were forked by the same server
    server = psutil.Process(servers.pop())
    assert is_fork_server(server) and server.ppid() == os.getpid()
    deadline = time.monotonic() + 5  # the workers went with their iterators, the server stays
    while worker_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_processes() == []


def _started_as(e):
    time.sleep(0.002)
    return [os.getpid(), os.path.basename(sys.argv[0]) == "worker.py"]


@pytest.mark.parametrize("server", ["1", "0"])
def test_without_the_fork_server_workers_are_fresh_interpreters(server, monkeypatch):
    monkeypatch.setenv("TPUFEED_FORKSERVER", server)
    ds = tpufeed.Dataset.from_sequence(list(range(600))).map(_started_as).batch(4)
    made = {tuple(row) for b in ds.workers(2) for row in b.tolist()}
    assert {fresh for pid, fresh in made if pid != os.getpid()} == {server == "0"}
    assert {pid for pid, _ in made} - {os.getpid()}  # workers made some of them


def _sees(e):
    time.sleep(0.002)
    return [
        os.getpid(),
        int(os.environ.get("TPUFEED_TEST_MARK", "-1")),
        int(os.path.exists("mark-here")),
    ]


def test_forked_workers_see_the_environment_and_directory_of_now(tmp_path, monkeypatch):
    """As a fresh interpreter started now would: not those of when the fork server started
    (an emulator address or credentials set later, a directory changed since)."""
    ds = tpufeed.Dataset.from_sequence(list(range(600))).map(_sees).batch(4).workers(2)
    list(ds)  # the fork server is running from here on
    monkeypatch.setenv("TPUFEED_TEST_MARK", "7")
    (tmp_path / "mark-here").write_text("")
    monkeypatch.chdir(tmp_path)
    made = {tuple(row) for b in ds for row in b.tolist()}
    by_workers = {(mark, here) for pid, mark, here in made if pid != os.getpid()}
    assert by_workers == {(7, 1)}


def _with_pid(i):
    time.sleep(0.002)
    return [i, os.getpid()]


def test_workers_start_from_a_directory_removed_under_the_caller(tmp_path, monkeypatch):
    """No raw FileNotFoundError from os.getcwd(): the workers start where the server is."""
    gone = tmp_path / "gone"
    gone.mkdir()
    list(tpufeed.Dataset.from_sequence(list(range(10))).batch(5).workers(2))  # the server runs
    monkeypatch.chdir(gone)
    gone.rmdir()
    ds = tpufeed.Dataset.from_sequence(list(range(600))).map(_with_pid).batch(4).workers(2)
    rows = [row for b in ds for row in b.tolist()]
    assert [i for i, _ in rows] == list(range(600))
    assert {pid for _, pid in rows} - {os.getpid()}  # workers made some of them


def test_workers_import_the_tpufeed_their_parent_imported_not_the_working_directorys(tmp_path):
    """`python -m` puts the working directory first on sys.path: workers (and their fork
    server) started that way ran whatever `tpufeed` sat there, not the parent's."""
    root = os.path.dirname(os.path.dirname(tpufeed.__file__))
    (tmp_path / "tpufeed").mkdir()
    (tmp_path / "tpufeed" / "__init__.py").write_text("raise ImportError('the decoy tpufeed')\n")
    (tmp_path / "job").mkdir()
    script = tmp_path / "job" / "run.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {root!r})
        import numpy as np, tpufeed
        ds = tpufeed.Dataset.from_sequence(list(range(40))).map(lambda i: np.full(2, i)).batch(4)
        print(sum(int(b.sum()) for b in ds.workers(2, isolate=True)))
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1560"]


_HEAVY = "torch jax tensorflow keras apache_beam grain pyarrow datasets pandas sklearn".split()


@pytest.mark.parametrize("server", ["1", "0"])
def test_workers_import_no_framework_that_their_pipeline_does_not_use(server, tmp_path):
    """A PyTorch script's workers: the parent's torch is not theirs to import, unless the
    pipeline's own functions or source need it (each import of torch costs a worker seconds
    of start-up). `google.cloud.storage` likewise, where no gs:// path is read."""
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        import torch
        import tpufeed

        heavy = {_HEAVY + ["google.cloud.storage"]!r}


        def loaded(i):
            return ",".join(m for m in heavy if m in sys.modules) or "none"


        def uses_torch(i):
            return loaded(i) if torch.tensor(i).item() == i else "wrong"


        assert "torch" in sys.modules
        for fn in (loaded, uses_torch):
            ds = tpufeed.Dataset.from_sequence(list(range(8))).map(fn)
            print(fn.__name__, sorted(set(ds.workers(2, isolate=True))))
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TPUFEED_FORKSERVER": server},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["loaded ['none']", "uses_torch ['torch']"]


def _server_pid() -> int:
    list(tpufeed.Dataset.from_sequence(list(range(4))).workers(1, isolate=True))
    (server,) = [c for c in psutil.Process().children() if is_fork_server(c)]
    return server.pid


def test_the_first_batch_does_not_wait_for_the_fork_server():
    """Until a worker has started, the parent makes the batches itself: a fork server that is
    still importing (here: stopped, and waited for without limit) holds nothing back, nor
    does asking for a worker's pid."""
    import signal
    import threading

    server = _server_pid()
    ds = tpufeed.Dataset.from_sequence(list(range(40))).map(lambda i: i * 2).batch(4)
    got: list = []
    os.kill(server, signal.SIGSTOP)
    try:
        it = ds.workers(2).options(stopped_s=None).iterator()
        reader = threading.Thread(target=lambda: got.append(next(it)), daemon=True)
        reader.start()
        reader.join(30)  # not a timing: a first batch that waits for the server never comes
        assert [b.tolist() for b in got] == [[0, 2, 4, 6]]
    finally:
        os.kill(server, signal.SIGCONT)
    assert sum(int(b.sum()) for b in it) == 2 * sum(range(40)) - 12
    it.close()
