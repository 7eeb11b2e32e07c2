"""A trace file's place on the pod's clock (`tpufeed.observe.pod_clock`): a file written while
the offset is still measured waits for it, at most `WRITE_WAIT_S`, then is written without it
and a warning says why; one measurement per store."""

from __future__ import annotations

import threading
import time

import pytest

from tests.observe.trace_events import read_trace
from tpufeed.observe import pod_clock, timeline
from tpufeed.observe.pod_clock import PodClock


@pytest.fixture(autouse=True)
def own_state(monkeypatch):
    """This process's place as it was before the test, whatever the test did to it."""
    for name in ("_clock", "_measuring", "_claimed"):
        monkeypatch.setattr(pod_clock, name, getattr(pod_clock, name))
    monkeypatch.setattr(pod_clock, "_clock", None)
    monkeypatch.setattr(pod_clock, "_measuring", None)


def write(tmp_path) -> dict:
    recorded = timeline.Timeline()
    return read_trace(recorded.write(tmp_path / "t.json"))["otherData"]


def test_a_write_waits_for_the_measurement_in_flight(tmp_path):
    store = object()
    assert pod_clock.begin(store) and not pod_clock.begin(store)  # one measurement a store
    placed = PodClock(1, 2, 1234, 56, 7, "run", "a store", 8)
    threading.Timer(0.3, pod_clock.settle, args=(placed,)).start()
    started = time.monotonic()
    assert write(tmp_path)["pod_clock"] == placed.to_json()
    assert 0.2 < time.monotonic() - started < 5


def test_a_write_waits_at_most_its_bound_then_warns(tmp_path, monkeypatch):
    monkeypatch.setattr(pod_clock, "WRITE_WAIT_S", 0.2)
    assert pod_clock.begin(object())
    started = time.monotonic()
    with pytest.warns(UserWarning, match="still being measured after 0.2 s"):
        assert write(tmp_path)["pod_clock"] is None
    assert time.monotonic() - started < 5


def test_a_new_store_measures_again():
    first, second = object(), object()
    assert pod_clock.begin(first)
    pod_clock.settle(PodClock(0, 2))
    assert not pod_clock.begin(first) and pod_clock.begin(second)
