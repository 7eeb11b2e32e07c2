"""What every trace file tpufeed writes must be: Chrome trace-event JSON that Perfetto and
chrome://tracing open (their UIs cannot run here, so the format's rules are checked)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

REQUIRED = ("ph", "ts", "pid", "tid", "name")


def read_trace(path: str | Path) -> dict[str, Any]:
    """The file, parsed and checked: required keys on every event, `dur >= 0` on every complete
    event, a `process_name` for every pid and a `thread_name` for every (pid, tid) with events."""
    document = json.loads(Path(path).read_text())
    events = document["traceEvents"]
    processes, threads = set(), set()
    for event in events:
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "process_sort_index"), event
            if event["name"] == "process_sort_index":  # a merged file's hosts in order
                assert isinstance(event["args"]["sort_index"], int), event
                continue
            assert isinstance(event["args"]["name"], str) and event["args"]["name"], event
            if event["name"] == "process_name":
                processes.add(event["pid"])
            else:
                threads.add((event["pid"], event["tid"]))
            continue
        missing = [key for key in REQUIRED if key not in event]
        assert not missing, f"{event} lacks {missing}"
        assert event["ph"] in ("X", "i"), event
        assert isinstance(event["ts"], (int, float)) and isinstance(event["name"], str), event
        if event["ph"] == "X":
            assert event["dur"] >= 0, event
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] != "M"}
    assert {pid for pid, _ in used} <= processes, "a process with events has no name"
    assert used <= threads, "a thread with events has no name"
    assert document["otherData"]["dropped_events"] >= 0
    return document


def names_of_processes(document: dict[str, Any]) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in document["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def names_of_threads(document: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in document["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def seconds_by(document: dict[str, Any], category: str) -> dict[int, dict[str, float]]:
    """Per pid, per name: the seconds of the complete events of `category`."""
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in document["traceEvents"]:
        if event["ph"] == "X" and event.get("cat") == category:
            out[event["pid"]][event["name"]] += event["dur"] / 1e6
    return out
