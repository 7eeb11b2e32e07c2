"""Clock offsets measured through a real store: torch's TCPStore served on 127.0.0.1, each host
a thread with its own client, and a clock of its own that reads a known offset from the
machine's (every thread shares CLOCK_MONOTONIC, so that offset is the true one). The offset
found must lie within the bound it states, whatever the store's delays; a process 0 that never
answers, or a store that is gone, ends the measurement within its bounds with a note."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from tpufeed.observe.pod_clock import PodClock
from tpufeed.run.hosts import clock_offset
from tpufeed.run.hosts.clock_offset import ROUNDS, StoreKeys, measure

dist = pytest.importorskip("torch.distributed")

SERVICE = "a TCPStore on 127.0.0.1"


@pytest.fixture
def server():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield store


def client(server) -> StoreKeys:
    store = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=10))
    return StoreKeys.of_torch(store, SERVICE)


def shifted(offset_ns: int):
    return lambda: time.perf_counter_ns() + offset_ns


def measure_all(server, offsets: list[int], contact_s: float = 20.0) -> list[PodClock]:
    """Every host measured at once, host i's clock `offsets[i]` ahead of the machine's."""
    results: list[PodClock | None] = [None] * len(offsets)

    def host(i: int) -> None:
        keys = client(server)
        results[i] = measure(keys, "t/", i, len(offsets), shifted(offsets[i]), contact_s=contact_s)

    threads = [threading.Thread(target=host, args=(i,)) for i in range(len(offsets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


@pytest.mark.parametrize("offsets", [[0, 0], [0, 7_500_000_000, -3_250_000_123, 42]])
def test_each_offset_lies_within_its_bound(server, offsets):
    clocks = measure_all(server, offsets)
    zero = clocks[0]
    assert zero == PodClock(
        0, len(offsets), 0, 0, zero.reference_unix_ns, zero.run, SERVICE, ROUNDS, None,
        zero.measured_at_ns,
    )  # fmt: skip
    for i, clock in enumerate(clocks[1:], 1):
        true = offsets[i] - offsets[0]
        assert abs(clock.offset_ns - true) <= clock.error_ns, (i, clock)
        assert clock.rounds == ROUNDS and clock.note is None
        assert clock.run == clocks[0].run  # one run's files are told apart from another's
        assert clock.error_ns < 1_000_000_000  # half a round trip on localhost, even loaded
        now = time.perf_counter_ns() + offsets[i]
        assert now - 30 * 10**9 < clock.measured_at_ns < now  # on the host's own clock


def test_process_0_that_comes_late_is_waited_for(server):
    """Host 1 asks before process 0 measures: its first round trip is long, the others not."""
    keys = client(server)
    found: list[PodClock] = []
    asker = threading.Thread(target=lambda: found.append(measure(keys, "late/", 1, 2)))
    asker.start()
    time.sleep(0.5)
    measure(client(server), "late/", 0, 2)
    asker.join(30)
    assert found[0].rounds == ROUNDS and abs(found[0].offset_ns) <= found[0].error_ns
    assert found[0].error_ns < 250_000_000  # not the first round's half second


def test_a_process_0_that_never_answers_is_noted_within_the_wait(server):
    started = time.monotonic()
    clock = measure(client(server), "alone/", 1, 2, contact_s=0.5)
    assert time.monotonic() - started < 5
    assert clock.offset_ns is None and clock.error_ns is None
    assert clock.note == "process 0 did not answer within 0.5 s"


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_store_that_is_gone_is_noted(tmp_path):
    """The process serving the store is killed after host 1 connected: the first call fails,
    named, at once."""
    code = (
        "import sys, time, torch.distributed as d\n"
        "s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False)\n"
        "print(s.port, flush=True); time.sleep(60)"
    )
    serving = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(serving.stdout.readline())
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
        serving.kill()
        serving.wait()
        started = time.monotonic()
        clock = measure(StoreKeys.of_torch(store, SERVICE), "gone/", 1, 2, contact_s=2)
    finally:
        serving.kill()
        serving.wait()
        serving.stdout.close()
    assert time.monotonic() - started < 10
    assert clock.offset_ns is None and clock.note.startswith(f"{SERVICE} failed: ")


def test_the_keys_are_removed_after(server):
    measure_all(server, [0, 5])
    keys = [f"t/{side}/1/{r}" for side in ("ask", "answer") for r in range(ROUNDS)]
    assert not any(server.check([key]) for key in keys)


def test_one_host_measures_nothing():
    """Outside a multi-host run no thread starts and nothing is claimed."""
    before = threading.active_count()
    clock_offset.measure_in_background()
    assert threading.active_count() == before


_EXITING = """
import atexit, threading, time
import torch.distributed as dist

def alive_at_exit():  # registered first, so it runs after tpufeed's own exit hook
    names = [t.name for t in threading.enumerate() if t.name.startswith("tpufeed-clock")]
    print("alive at exit:", names, flush=True)

atexit.register(alive_at_exit)
from tpufeed.run.hosts import clock_offset, exit_safe
server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
client = dist.TCPStore("127.0.0.1", server.port, is_master=False)
keys = clock_offset.StoreKeys.of_torch(client, "a TCPStore")
exit_safe.start(clock_offset.measure, (keys, "x/", 1, 2), "tpufeed-clock-offset")
time.sleep(0.3)  # the thread waits for a process 0 that never answers
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_exit_stops_a_waiting_measurement_before_python_finalises():
    """A thread still inside the store's native client when Python finalises aborts the
    process ('terminate called without an active exception', exit status 134): the exit
    stops the measurement's threads and waits for them first."""
    done = subprocess.run(
        [sys.executable, "-c", _EXITING], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "alive at exit: []" in done.stdout, done.stdout + done.stderr


def test_a_trace_written_without_the_offset_stops_the_measurement(server, monkeypatch):
    """A trace file that stops waiting for the measurement (process 0 records no timeline, so
    never answers) ends it at its next check: no thread is left inside the store's client for
    the process's exit (where process 0, which serves the store, may be gone already)."""
    from tpufeed.observe import pod_clock

    for name in ("_clock", "_measuring", "_given_up", "_claimed"):  # restored after the test
        monkeypatch.setattr(pod_clock, name, None)
    assert pod_clock.begin(object())
    found: list[PodClock] = []
    keys = client(server)
    asker = threading.Thread(target=lambda: found.append(measure(keys, "given-up/", 1, 2)))
    asker.start()
    with pytest.warns(UserWarning, match="written without it"):
        assert pod_clock.current(wait_s=0.2) is None
    asker.join(5)  # one call of at most SLICE_S, then it stops (CONTACT_S is 60 s)
    assert not asker.is_alive()
    assert found[0].offset_ns is None
    assert found[0].note == "the trace file was written without it first"
    pod_clock.settle(found[0])
