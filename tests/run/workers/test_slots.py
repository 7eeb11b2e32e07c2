"""Shared memory between workers and the parent: a full /dev/shm named with the fix, unbatched
elements through it when they fit (through the pipe when not), and leaves that cannot go."""

import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import TransformError, WorkerError

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]


def _with_small_dev_shm(tmp_path, code):
    """Runs `code` in a fresh interpreter that sees an 8 MiB /dev/shm of its own (as Docker
    gives 64 MiB); skips where a private /dev/shm cannot be mounted."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip("cannot mount a private /dev/shm here")
    script = tmp_path / "big.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=8m tmpfs /dev/shm && {sys.executable} {script}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_full_dev_shm_is_named_with_the_fix_not_a_sigbus(tmp_path):
    """Batches bigger than /dev/shm has room for must fail clearly: with the default budget
    (half of its free space), before a segment is made."""
    out = _with_small_dev_shm(
        tmp_path,
        """
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
    """,
    )
    assert "a batch of 4,194,304 bytes does not fit" in out and "--shm-size" in out, out


def test_unbatched_elements_too_big_for_dev_shm_come_through_the_pipe(tmp_path):
    """Batches need /dev/shm; unbatched elements only use it when there is room: a chunk of
    them that does not fit is sent pickled, as it was before."""
    out = _with_small_dev_shm(
        tmp_path,
        """
        import numpy as np, tpufeed
        ds = (tpufeed.Dataset.from_sequence(list(range(40)))
              .map(lambda i: {"x": np.full(2**20 // 4, i, np.float32)})
              .workers(2, isolate=True))
        print(sorted(int(e["x"][0]) for e in ds) == list(range(40)))
    """,
    )
    assert out.split() == ["True"], out


def test_unbatched_elements_come_through_shared_memory_equal_to_no_workers():
    ds = (
        tpufeed.Dataset.from_sequence(list(range(300)))
        .shuffle(5)
        .map(lambda i: {"tokens": np.arange(i % 37, dtype=np.int32) + i, "id": i, "name": f"r{i}"})
    )
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

    ds = (
        tpufeed.Dataset.from_sequence(list(range(40)))
        .map(lambda i: {"x": np.arange(3) + i, "lock": threading.Lock()})
        .workers(2, isolate=True)
    )
    with pytest.raises(TransformError, match="cannot be sent from a worker process.*_thread.lock"):
        list(ds)


def test_a_worker_over_its_share_gives_idle_segments_back_and_waits_for_their_release():
    """The budget's protocol, one process playing both sides: the worker drops its idle
    segment, and counts it gone only when the parent says it has unmapped it too."""
    import os
    import uuid

    from tpufeed.run.workers.slots import WorkerSlots, segment_prefix

    slots = WorkerSlots(segment_prefix(uuid.uuid4().hex[:8]), 2, share=300_000)
    told = []

    def parent_answers():  # the parent has unmapped what was dropped, and says so
        assert told, "waited with nothing dropped and nothing to wait for"
        slots.released(told.pop())

    def never_waits():
        raise AssertionError("waited with room to spare")

    try:
        index, buffer, name = slots.acquire(100_000, never_waits, told.append)
        assert name is not None and slots.live == 125_000
        buffer.release()  # the batch is written and sent
        slots.release(index)
        sizes = {index: 125_000}
        index, _, name = slots.acquire(200_000, parent_answers, lambda s: told.append(sizes[s[0]]))
        assert name is not None and slots.live == 250_000 and told == []
        with pytest.raises(WorkerError, match="a batch of 300,001 bytes"):
            WorkerSlots("x", 1, 300_000, lambda n: WorkerError(f"a batch of {n:,} bytes")).acquire(
                300_001, never_waits, told.append
            )
    finally:
        slots.unlink_all()
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(slots._prefix)]


def test_a_segment_gives_up_its_headroom_then_the_batch_gives_up_waiting_when_told():
    """Beside a segment the consumer holds, a new one is made without its quarter of headroom
    if that fits; where even that does not fit, the worker says it waits (`cramped`), and
    gives up (`NoRoom`) once the parent answers that room will not come."""
    import uuid

    from tpufeed.run.workers.slots import NoRoom, WorkerSlots, segment_prefix

    slots = WorkerSlots(segment_prefix(uuid.uuid4().hex[:8]), 3, share=300_000)
    asked = []

    def never_waits():
        raise AssertionError("waited with room to spare")

    def parent_says_spill(nbytes):
        asked.append(nbytes)
        return len(asked) > 1  # the first time it waits for the parent's answer

    try:
        held, buffer, _ = slots.acquire(100_000, never_waits, asked.append)
        buffer.release()  # written, sent, and lent to the consumer: not released
        _, buffer, name = slots.acquire(160_000, never_waits, asked.append)
        assert name is not None and len(buffer) == 160_000 and slots.live == 285_000
        buffer.release()
        with pytest.raises(NoRoom):
            slots.acquire(200_000, lambda: None, asked.append, parent_says_spill)
        assert asked == [200_000, 200_000] and slots.live == 285_000
    finally:
        slots.unlink_all()
