"""The worker engine: identical output for any worker count, clean failure, nothing left behind."""

import gc
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

import tpufeed
from tpufeed.errors import TransformError, WorkerError

from tests.processes import default_ctrl_c, is_fork_server, wait_for_workers, worker_processes

pytestmark = pytest.mark.multiprocess


def leftovers():
    segments = glob.glob(f"/dev/shm/tpufeed-{os.getpid()}-*")
    return [c.pid for c in worker_processes()], segments


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    gc.collect()
    deadline = time.monotonic() + 5
    while leftovers() != ([], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers() == ([], [])


def augment(element, rng):
    return {"x": element["x"] + rng.integers(0, 100, size=element["x"].shape), "id": element["id"]}


PIPELINES = {
    "batch": lambda ds: ds.random_map(augment).batch(7),
    "drop": lambda ds: ds.random_map(augment).batch(7, drop_remainder=True),
    "filter": lambda ds: ds.filter(lambda e: e["id"] % 3 != 1).random_map(augment).batch(5),
    "filter-drop": lambda ds: ds.filter(lambda e: e["id"] % 4 == 0).batch(3, drop_remainder=True),
    "after-batch": lambda ds: ds.batch(6).map(lambda b: {**b, "sum": b["x"].sum(axis=1)}),
    "unbatched": lambda ds: ds.random_map(augment),
    "strings": lambda ds: ds.map(lambda e: {**e, "name": f"r{e['id']}"}).batch(4),
    "flat_map": lambda ds: ds.flat_map(lambda e: [e] * int(e["id"] % 3)).random_map(augment).batch(5),
    "flat_map-unbatched": lambda ds: ds.flat_map(lambda e: [e, e] if e["id"] % 2 else []),
    "errors": lambda ds: ds.map(lambda e: e if e["id"] % 9 else 1 / 0).ignore_errors(100).batch(4),
}


def make(pipeline, n=61, epochs=2, hosts=1, host=0):
    ds = (tpufeed.Dataset.from_sequence(list(range(n))).shuffle(3).shard(host, hosts)
          .map(lambda i: {"x": np.arange(4) * i, "id": np.int64(i)}))
    return PIPELINES[pipeline](ds).repeat(epochs)


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_output_is_identical_for_any_worker_count(pipeline, workers):
    expected = list(make(pipeline))
    same(list(make(pipeline).workers(workers).prefetch(2)), expected)


@pytest.mark.parametrize("pipeline", ["batch", "filter", "unbatched", "flat_map", "flat_map-unbatched"])
def test_resume_with_workers_matches_resume_without(pipeline):
    ds = make(pipeline, n=23)
    full = list(ds)
    it = ds.workers(2).iterator()
    for step in range(0, len(full) + 1, 3):
        while len(full) - step < len(list(ds.iterator(it.get_state()))):
            next(it)
        same(list(ds.workers(2).iterator(it.get_state())), full[step:])
    it.close()


def test_state_describes_what_the_consumer_received_not_what_workers_made():
    ds = make("batch", n=200, epochs=1).workers(2).prefetch(8)
    it = ds.iterator()
    next(it)
    time.sleep(0.3)  # workers run ahead
    assert it.get_state()["consumed"] == 7
    it.close()


def test_hosts_with_workers_still_exactly_once():
    seen = []
    for host in range(3):
        for batch in make("batch", epochs=1, hosts=3, host=host).workers(2):
            seen += batch["id"].tolist()
    assert sorted(seen) == list(range(61))


def test_a_closure_over_local_state_runs_in_workers():
    offset = np.int64(1000)
    ds = tpufeed.Dataset.from_sequence(list(range(10))).map(lambda i: i + offset).batch(5)
    assert [b.tolist() for b in ds.workers(2)] == [[1000, 1001, 1002, 1003, 1004], list(range(1005, 1010))]


def boom(element):
    if element["id"] == 13:
        raise ValueError("bad pixel")
    return element


def test_a_user_error_names_the_record_and_carries_the_worker_traceback(tmp_path):
    from tpufeed.sources.array_record import write_array_records
    path = str(tmp_path / "data.array_record")
    write_array_records(path, (tpufeed.codec.encode({"id": i}) for i in range(40)))
    ds = tpufeed.Dataset.from_array_record(path).map(tpufeed.codec.decode).map(boom).batch(4).workers(2)
    with pytest.raises(TransformError) as info:
        list(ds)
    message = str(info.value)
    assert "bad pixel" in message and "ValueError" in message
    assert info.value.record == 13 and info.value.path == path
    assert "data.array_record record 13" in message
    assert "in boom" in message


def test_an_error_in_a_worker_comes_back_with_its_traceback_and_record():
    parent = os.getpid()

    def fails_in_workers(element):
        if os.getpid() != parent:
            raise ValueError("only workers fail")
        return element

    ds = tpufeed.Dataset.from_sequence(list(range(10**5))).map(fails_in_workers).batch(8).workers(2)
    with pytest.raises(TransformError) as info:
        list(ds)
    message = str(info.value)
    assert "only workers fail" in message and "in tpufeed worker" in message
    assert "in fails_in_workers" in info.value.traceback_text
    assert f"record {info.value.record}" in message


def test_an_unstackable_batch_in_a_worker_names_the_records():
    ds = tpufeed.Dataset.from_sequence(list(range(10))).map(lambda i: np.zeros(1 + (i == 6))).batch(10)
    with pytest.raises(tpufeed.BatchError, match=r"shape \(1,\).*record 6.*shape \(2,\)"):
        list(ds.workers(2))


def test_a_killed_worker_surfaces_as_an_error_quickly():
    ds = tpufeed.Dataset.from_sequence(list(range(10_000))).map(lambda i: (time.sleep(0.01), i)[1])
    it = ds.batch(8).workers(2).iterator()
    next(it)
    victim = wait_for_workers(1)[0]
    victim.send_signal(signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=f"pid {victim.pid}.*signal 9"):
        for _ in it:
            pass
    assert time.monotonic() - start < 5
    it.close()


def test_close_and_garbage_collection_stop_the_workers():
    ds = make("batch", n=500, epochs=None).workers(2)
    it = ds.iterator()
    try:
        next(it)
        assert len(wait_for_workers(2)) == 2
    finally:
        it.close()
    it.close()
    assert leftovers()[0] == []
    it = ds.iterator()
    next(it)
    del it
    gc.collect()


def test_workers_are_not_forked_from_the_user_script(tmp_path):
    """A training script's top-level code (e.g. jax.distributed.initialize()) runs once."""
    marker = tmp_path / "runs"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import os, tpufeed
        with open({str(marker)!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        ds = tpufeed.Dataset.from_sequence(list(range(50))).map(lambda i: i * 2).batch(5).workers(2)
        assert sum(int(b.sum()) for b in ds) == 2 * sum(range(50))
    """))
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)
    assert len(marker.read_text().split()) == 1


def test_ctrl_c_leaves_no_worker_and_no_shared_memory(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import time, tpufeed, numpy as np
        ds = (tpufeed.Dataset.from_sequence(list(range(10**6)))
              .map(lambda i: np.full(1000, i, np.int32)).batch(64).workers(2))
        for i, b in enumerate(ds):
            if i == 2:
                print("running", flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            preexec_fn=default_ctrl_c)
    assert proc.stdout.readline().strip() == "running"
    workers = wait_for_workers(2, proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    psutil.wait_procs(workers, timeout=5)
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    assert glob.glob(f"/dev/shm/tpufeed-{proc.pid}-*") == []


def test_parent_killed_takes_its_workers_along(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import tpufeed, numpy as np
        ds = tpufeed.Dataset.from_sequence(list(range(10**6))).map(lambda i: np.full(10, i)).batch(8).workers(2)
        for i, b in enumerate(ds):
            if i == 2:
                print("running", flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "running"
    workers = wait_for_workers(2, proc.pid, timeout_s=20)
    servers = [c for c in psutil.Process(proc.pid).children() if is_fork_server(c)]
    assert len(workers) == 2 and len(servers) == 1
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(workers + servers, timeout=5)
    assert not alive
    assert glob.glob(f"/dev/shm/tpufeed-{proc.pid}-*") == []


def test_asking_for_workers_starts_their_fork_server_before_the_first_batch(tmp_path):
    script = tmp_path / "ask.py"
    script.write_text(textwrap.dedent("""
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
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "after workers(0): 0", "after workers(2): 1", "named: tpufeed-forksrv",
        f"items: {[i * 2 for i in range(8)]}", "servers: 1"], proc.stdout


def slow_square(i):
    time.sleep(0.002)
    return np.int64(i) ** 2


def test_an_iterator_made_in_a_thread_that_exits_keeps_its_workers():
    """Training frameworks make iterators in helper threads; the workers outlive that thread."""
    import threading

    ds = tpufeed.Dataset.from_sequence(list(range(3000))).map(slow_square).batch(10)
    made = {}

    def make_and_start():
        it = made["it"] = ds.workers(2).iterator()
        made["first"] = [next(it)]
        while "transfer" not in it.stats().stages:  # until workers answer
            made["first"].append(next(it))
        time.sleep(1.0)  # every worker is past its start-up

    thread = threading.Thread(target=make_and_start)
    thread.start()
    thread.join()
    time.sleep(0.5)  # time for a signal sent at the thread's exit to arrive
    got = [*made["first"], *made["it"]]
    assert len(made["first"]) < 250  # the workers took part, with batches to go
    assert np.array_equal(np.concatenate(got), np.arange(3000) ** 2)
    made["it"].close()


def _with_small_dev_shm(tmp_path, code):
    """Runs `code` in a fresh interpreter that sees an 8 MiB /dev/shm of its own (as Docker
    gives 64 MiB); skips where a private /dev/shm cannot be mounted."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a private /dev/shm here")
    script = tmp_path / "big.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run(["unshare", "-m", "sh", "-c",
                           f"mount -t tmpfs -o size=8m tmpfs /dev/shm && {sys.executable} {script}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_full_dev_shm_is_named_with_the_fix_not_a_sigbus(tmp_path):
    """Batches bigger than /dev/shm has room for must fail clearly."""
    out = _with_small_dev_shm(tmp_path, """
        import numpy as np, tpufeed
        ds = (tpufeed.Dataset.from_sequence(list(range(64)))
              .map(lambda i: {"x": np.full(2**20 // 4, i, np.float32)}).batch(4)
              .workers(2, isolate=True).prefetch(2))
        try:
            for b in ds:
                pass
            print("no error")
        except tpufeed.WorkerError as e:
            print(str(e).split("\\n")[0])
    """)
    assert "no room in /dev/shm for a" in out and "--shm-size" in out, out


def test_unbatched_elements_too_big_for_dev_shm_come_through_the_pipe(tmp_path):
    """Batches need /dev/shm; unbatched elements only use it when there is room: a chunk of
    them that does not fit is sent pickled, as it was before."""
    out = _with_small_dev_shm(tmp_path, """
        import numpy as np, tpufeed
        ds = (tpufeed.Dataset.from_sequence(list(range(40)))
              .map(lambda i: {"x": np.full(2**20 // 4, i, np.float32)})
              .workers(2, isolate=True))
        print(sorted(int(e["x"][0]) for e in ds) == list(range(40)))
    """)
    assert out.split() == ["True"], out


def _batches_of(n, batch, workers, prefetch=0, isolate=False):
    return (tpufeed.Dataset.from_sequence([{"x": np.full(64, i, np.int64)} for i in range(n)])
            .shuffle(3).map(lambda e: {"x": e["x"] * 2}).batch(batch).prefetch(prefetch)
            .workers(workers, isolate=isolate))


def _lent(array):
    """Whether a batch leaf is a view of a worker's slot (lent) rather than memory of its own."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return not isinstance(array, np.ndarray) or not array.flags.owndata


@pytest.mark.parametrize("prefetch", [0, 3])
def test_batches_are_lent_not_copied_and_stay_intact_while_held(prefetch):
    expected = [b["x"].copy() for b in _batches_of(400, 8, 0)]
    # Isolated, every batch comes from a worker: none is made by the parent while the workers
    # start, or run by it on a spare core, so how many are lent does not depend on timing.
    it = iter(_batches_of(400, 8, 2, prefetch, isolate=True))
    kept, lent = [], 0
    for k, batch in enumerate(it):
        lent += _lent(batch["x"])
        np.testing.assert_array_equal(batch["x"], expected[k])
        if k % 10 == 0:
            kept.append((k, batch))  # held while 20 more batches are written by the workers
        batch["x"] += 1  # the consumer owns what it holds: writing into it harms nothing
        batch["x"] -= 1
        if len(kept) > 2:
            old_k, old = kept.pop(0)
            np.testing.assert_array_equal(old["x"], expected[old_k])
            del old  # so the consumer holds at most three: two kept and the current one
    it.close()
    # A consumer holding two batches past their step, on top of the current one, still gets
    # every batch lent, whichever worker made the batches it keeps. With a prefetch thread also
    # holding some, most are.
    assert (lent == len(expected) if prefetch == 0 else lent >= len(expected) * 3 // 4), lent


def test_unbatched_elements_come_through_shared_memory_equal_to_no_workers():
    ds = (tpufeed.Dataset.from_sequence(list(range(300))).shuffle(5)
          .map(lambda i: {"tokens": np.arange(i % 37, dtype=np.int32) + i, "id": i, "name": f"r{i}"}))
    want = list(ds)
    got = list(ds.workers(2, isolate=True))
    assert [e["id"] for e in got] == [e["id"] for e in want]
    for a, b in zip(got, want):
        assert list(a) == list(b) and a["name"] == b["name"] and type(a["id"]) is int
        assert a["tokens"].dtype == np.int32 and np.array_equal(a["tokens"], b["tokens"])
    # Views of the one copy the parent made of each answer's slot, not arrays unpickled one by one.
    copies = {id(e["tokens"].base) for e in got}
    assert len(copies) <= len(got) // 4


def test_an_unsendable_leaf_beside_arrays_is_named_not_a_raw_traceback():
    """The arrays go into shared memory; a leaf that cannot be pickled rides in the layout,
    and fails there with the same error as an element sent whole."""
    import threading

    ds = (tpufeed.Dataset.from_sequence(list(range(40)))
          .map(lambda i: {"x": np.arange(3) + i, "lock": threading.Lock()}).workers(2, isolate=True))
    with pytest.raises(TransformError, match="cannot be sent from a worker process.*_thread.lock"):
        list(ds)


def test_a_consumer_that_keeps_every_batch_never_stalls_the_workers():
    expected = [b["x"].copy() for b in _batches_of(600, 4, 0)]
    got = list(_batches_of(600, 4, 2))  # far more batches than the workers have slots
    assert len(got) == len(expected) == 150
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a["x"], b)


def test_dropped_batches_give_their_slots_back():
    from tpufeed.run.workers.leases import Leases

    leases = Leases(workers=1, cap=2)
    segment = bytearray(256)
    first = leases.lend(0, 0, segment, 128)
    view = first[64:].view(np.int64)
    leases.lend(0, 1, segment, 128)  # dropped at once
    assert not leases.can_lend(0)
    assert leases.returned() == [(0, 1)]
    del first
    assert leases.returned() == []  # a view of the batch is still held
    del view
    assert leases.returned() == [(0, 0)] and leases.lent == [0] and leases.can_lend(0)


def _where(e):
    time.sleep(0.002)
    return {"id": e, "pid": os.getpid()}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the parent steals only with a core of its own")
def test_the_parent_runs_chunks_itself_rather_than_wait_and_order_holds():
    ds = tpufeed.Dataset.from_sequence(list(range(800))).shuffle(1).map(_where).batch(8)
    expected = [b["id"].tolist() for b in ds]
    got = list(ds.workers(1))
    assert [b["id"].tolist() for b in got] == expected
    makers = {int(b["pid"][0]) for b in got[10:]}
    assert os.getpid() in makers and len(makers) == 2  # the worker, and the parent in its waits


def _cold_first(e):
    """1 ms a record, and a second more on the first call in a worker (its first task is cold)."""
    if os.getpid() != int(os.environ["TPUFEED_TEST_PARENT"]) and not _COLD["warm"]:
        time.sleep(1.0)
        _COLD["warm"] = True
    time.sleep(0.001)
    return {"id": e, "pid": os.getpid()}


_COLD = {"warm": False}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) > 4, reason="one worker per core")
def test_the_parent_makes_batches_while_workers_without_a_spare_core_are_cold(monkeypatch):
    """With a worker on every core the parent steals no work from warm workers, but while they
    are still cold (their first task opens files, warms caches) it runs chunks itself rather
    than wait: batches it made come after the first batch a worker made."""
    monkeypatch.setenv("TPUFEED_TEST_PARENT", str(os.getpid()))
    workers = len(os.sched_getaffinity(0))
    ds = tpufeed.Dataset.from_sequence(list(range(2000))).map(_cold_first).batch(8)
    got = list(ds.workers(workers))
    assert [int(i) for b in got for i in b["id"]] == list(range(2000))
    makers = [int(b["pid"][0]) for b in got]
    first_from_a_worker = next(k for k, pid in enumerate(makers) if pid != os.getpid())
    assert os.getpid() in makers[first_from_a_worker:]


def _fails_at_300(e):
    time.sleep(0.001)
    if e == 300:
        raise ValueError("bad record")
    return e


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the parent steals only with a core of its own")
def test_an_error_in_a_chunk_the_parent_ran_ahead_comes_in_order():
    ds = tpufeed.Dataset.from_sequence(list(range(800))).map(_fails_at_300).batch(10).workers(1)
    got = []
    with pytest.raises(TransformError) as info:
        for batch in ds:
            got.append(batch.tolist())
    assert got == [list(range(i, i + 10)) for i in range(0, 300, 10)]
    assert info.value.record == 300


def _counted(path):
    def fn(e):
        with open(path, "a") as f:
            f.write("x\n")
        return e
    return fn


def test_auto_hands_its_warm_up_on_instead_of_making_it_twice(tmp_path):
    calls = tmp_path / "calls"
    ds = (tpufeed.Dataset.from_sequence(list(range(3000))).shuffle(2).map(_counted(str(calls)))
          .batch(16))
    expected = [b.tolist() for b in ds]
    calls.unlink()
    got = [b.tolist() for b in ds.workers("auto").prefetch("auto")]
    assert got == expected
    assert calls.read_text().count("x") == 3000  # each record transformed once


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
    return [os.getpid(), int(os.environ.get("TPUFEED_TEST_MARK", "-1")),
            int(os.path.exists("mark-here"))]


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
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {root!r})
        import numpy as np, tpufeed
        ds = tpufeed.Dataset.from_sequence(list(range(40))).map(lambda i: np.full(2, i)).batch(4)
        print(sum(int(b.sum()) for b in ds.workers(2, isolate=True)))
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1560"]


_BLAS_SCRIPT = """
import json, os, sys
sys.path.insert(0, {root!r})
import numpy as np, tpufeed
from threadpoolctl import threadpool_info

def blas(i):
    np.dot(np.ones((64, 64)), np.ones((64, 64)))  # a BLAS call, in case threads start lazily
    info = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
    return np.array([os.getpid(), info[0] if info else -1,
                     int("OPENBLAS_NUM_THREADS" in os.environ)])

ds = tpufeed.Dataset.from_sequence(list(range(64))).map(blas).batch(8).workers(2, isolate=True)
rows = {{tuple(row) for b in ds for row in b.tolist()}}
from tpufeed.run.workers.forkserver import shared_server
server = shared_server()
print(json.dumps({{"threads": sorted({{t for pid, t, _ in rows if pid != os.getpid()}}),
                  "env_seen": sorted({{e for _, _, e in rows}}),
                  "server_threads": server and len(os.listdir(f"/proc/{{server.proc.pid}}/task"))}}))
"""


@pytest.mark.parametrize("fork_server", ["1", "0"])
@pytest.mark.parametrize("user_setting", [None, "2"])
def test_workers_run_numpy_blas_on_one_thread_unless_the_user_chose_a_count(user_setting,
                                                                             fork_server, tmp_path):
    """OpenBLAS starts a spinning thread per core as numpy loads: in the fork server that took
    a core from the parent for the first ~0.1 s of every run. Workers get one BLAS thread
    (N workers already fill N cores), and the user's environment does not change."""
    root = os.path.dirname(os.path.dirname(tpufeed.__file__))
    script = tmp_path / "blas.py"
    script.write_text(_BLAS_SCRIPT.format(root=root))
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    env["TPUFEED_FORKSERVER"] = fork_server  # "0": workers are fresh interpreters
    if user_setting is not None:
        env["OPENBLAS_NUM_THREADS"] = user_setting
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    if user_setting is None:
        assert seen == {"threads": [1], "env_seen": [0],
                        "server_threads": 1 if fork_server == "1" else None}
    else:
        assert seen["threads"] == [2] and seen["env_seen"] == [1]
