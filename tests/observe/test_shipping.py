"""What a worker ships with an answer: nothing when it has nothing, its counts and events
otherwise, counted and recorded in the receiving process."""

from __future__ import annotations

import pytest

from tpufeed.observe import counts, shipping, timeline


@pytest.fixture(autouse=True)
def nothing_recording():
    timeline.stop()
    counts.drain()
    yield
    timeline.stop()


def test_nothing_to_ship_costs_zero_bytes():
    assert shipping.pack() == b""
    assert shipping.receive(b"") == {}


def test_counts_and_events_arrive_in_the_receivers_tally_and_timeline():
    recording = timeline.start()
    counts.count("gcs_retries", 2)
    timeline.complete("map(f)", 0.01, "stage", {"records": 5})
    blob = shipping.pack()  # the worker's side: drained
    assert blob and shipping.pack() == b"" and not recording.events
    before = counts.snapshot()
    assert shipping.receive(blob) == {"gcs_retries": 2}  # the parent's side
    assert counts.since(before)["gcs_retries"] == 2
    ((name, category, _, duration, _, _, args),) = recording.events
    assert (name, category, args) == ("map(f)", "stage", {"records": 5})
    assert duration == pytest.approx(1e7, rel=1e-6)


def test_events_received_while_nothing_records_are_let_go():
    timeline.start()
    timeline.instant("gcs retry", "gcs")
    blob = shipping.pack()
    timeline.stop()
    assert shipping.receive(blob) == {}
    assert timeline.recording() is None
