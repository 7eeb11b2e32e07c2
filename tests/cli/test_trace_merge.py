"""`tpufeed trace merge`: hosts' trace files as one Chrome / Perfetto trace, a process group per
host, events shifted onto process 0's clock by the offsets the files carry, the alignment
stated; bad input refused naming the file and why; any length read in bounded memory.

The shift's arithmetic is checked on files whose clocks are made up here, so that every
expected timestamp is known exactly; real files come from real runs (one here, several hosts
in tests/semantics/test_multihost_trace.py)."""

from __future__ import annotations

import json
import os
import threading

import pytest

import tpufeed
from tests.cli.test_json_output import parsed
from tests.cli.test_json_output import tpufeed as run_tpufeed
from tests.observe.trace_events import read_trace
from tpufeed.cli import main
from tpufeed.cli.json_output import TRACE_MERGE
from tpufeed.cli.trace import reader
from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceError
from tpufeed.observe import timeline

S = 1_000_000_000  # nanoseconds


def host_file(path, index=None, *, offset_ns=None, error_ns=0, unix_origin_ns=None,
              trace_origin_ns=None, reference_unix_ns=None, run="r1", events=(), pid=None,
              clock=True, hostname=None, measured_at_ns=None):  # fmt: skip
    """A trace file as a host of a run writes it, with the clock metadata given."""
    pid = 1000 + (index or 0) if pid is None else pid
    other = {"producer": "tpufeed", "capacity": 10, "dropped_events": 0}
    other["host"] = {"hostname": hostname or f"h{index}", "pid": pid}
    if clock:
        other["clock"] = {"trace_origin_ns": trace_origin_ns, "unix_origin_ns": unix_origin_ns}
    if index is not None:
        other["pod_clock"] = {
            "process_index": index,
            "process_count": 4,
            "offset_ns": offset_ns,
            "error_ns": error_ns if offset_ns is not None else None,
            "reference_unix_ns": reference_unix_ns,
            "run": run,
            "service": "a store",
            "rounds": 8,
            "note": None if offset_ns is not None else "process 0 did not answer within 60 s",
            "measured_at_ns": measured_at_ns,
        }
    trace = [
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "tpufeed consumer"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "MainThread"}},
    ]
    trace += [
        {"name": name, "cat": "stage", "ph": "X", "ts": ts, "dur": 10.0, "pid": pid, "tid": 1}
        for name, ts in events
    ]
    path.write_text(json.dumps({"traceEvents": trace, "otherData": other}))
    return str(path)


def merged(tmp_path, *paths) -> dict:
    out = tmp_path / "pod.json"
    assert main(["trace", "merge", *map(str, paths), "-o", str(out)]) == 0
    return read_trace(out)


def starts(document) -> dict:
    """(group name, event name) -> ts of the merged file."""
    groups = {
        e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"
    }
    return {
        (groups[e["pid"]].split(":")[0], e["name"]): e["ts"]
        for e in document["traceEvents"]
        if e["ph"] != "M"
    }


def test_each_host_is_shifted_by_its_offset_onto_process_0s_clock(tmp_path):
    """Host 1's trace clock reads 5 s ahead of process 0's (+-0.2 ms) and its recording began
    1.5 s after process 0's; host 2's reads 3 s behind and began 0.25 s before. Process 0's
    wall clock is its trace clock + 100 s."""
    ref = 100 * S
    a = host_file(tmp_path / "a.json", 0, offset_ns=0, trace_origin_ns=10 * S,
                  reference_unix_ns=ref, events=[("x", 0.0), ("y", 2000.0)])  # fmt: skip
    b = host_file(tmp_path / "b.json", 1, offset_ns=5 * S, error_ns=200_000,
                  trace_origin_ns=16_500_000_000, reference_unix_ns=ref,
                  unix_origin_ns=1, events=[("x", 0.0), ("z", 7.5)])  # fmt: skip
    c = host_file(tmp_path / "c.json", 2, offset_ns=-3 * S, error_ns=50_000,
                  trace_origin_ns=6_750_000_000, reference_unix_ns=ref,
                  events=[("x", 1.0)])  # fmt: skip
    document = merged(tmp_path, b, c, a)
    # process 0's clock: a's ts 0 at 10 s, b's at 11.5 s, c's at 9.75 s: c's first event
    # (ts 1 us) is the merged file's start
    assert starts(document) == {
        ("host 0", "x"): 250_000 - 1.0,
        ("host 0", "y"): 252_000 - 1.0,
        ("host 1", "x"): 1_750_000 - 1.0,
        ("host 1", "z"): 1_750_007.5 - 1.0,
        ("host 2", "x"): 0.0,
    }
    alignment = document["otherData"]["alignment"]
    assert (alignment["max_error_ns"], alignment["max_error_host"]) == (200_000, 1)
    assert alignment["statement"].startswith("within ±0.200 ms of process 0's clock")
    assert [h["host"] for h in document["otherData"]["hosts"]] == [1, 2, 0]


def test_one_process_group_per_host_named_with_its_host_and_pid(tmp_path):
    files = [
        host_file(
            tmp_path / f"{i}.json",
            i,
            offset_ns=0,
            trace_origin_ns=S,
            reference_unix_ns=0,
            events=[("x", 1.0)],
        )  # fmt: skip
        for i in (3, 0, 1)
    ]
    document = merged(tmp_path, *files)
    names = sorted(
        (e["pid"], e["args"]["name"])
        for e in document["traceEvents"]
        if e["name"] == "process_name"
    )
    assert names == [(1, "host 0: h0 (pid 1000)"), (2, "host 1: h1 (pid 1001)"),
                     (4, "host 3: h3 (pid 1003)")]  # fmt: skip
    threads = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {f"tpufeed consumer (pid {p}): MainThread" for p in (1000, 1001, 1003)}


def test_files_without_offsets_are_aligned_by_wall_clock_and_say_so(tmp_path, capsys):
    a = host_file(tmp_path / "a.json", unix_origin_ns=50 * S, events=[("x", 0.0)])
    b = host_file(tmp_path / "b.json", pid=7, unix_origin_ns=52 * S, events=[("x", 0.0)])
    document = merged(tmp_path, a, b)
    assert starts(document) == {("host 0", "x"): 0.0, ("host 1", "x"): 2_000_000.0}
    out = capsys.readouterr().out
    assert "alignment: hosts 0, 1 carry no measured offset" in out
    assert "aligned by wall clock only" in out
    assert document["otherData"]["alignment"]["wall_clock_only"] == [0, 1]


def test_a_host_whose_measurement_failed_is_aligned_by_wall_clock_beside_measured_ones(tmp_path):
    """Host 1 has no offset: its own wall clock places it, beside process 0's wall clock."""
    a = host_file(tmp_path / "a.json", 0, offset_ns=0, trace_origin_ns=3 * S,
                  reference_unix_ns=10 * S, events=[("x", 0.0)])  # fmt: skip
    b = host_file(tmp_path / "b.json", 1, unix_origin_ns=14 * S, events=[("x", 0.0)])
    document = merged(tmp_path, a, b)
    assert starts(document) == {("host 0", "x"): 0.0, ("host 1", "x"): 1_000_000.0}
    hosts = {h["host"]: h for h in document["otherData"]["hosts"]}
    assert hosts[1]["aligned_by"] == "wall clock only"
    assert hosts[1]["note"] == "process 0 did not answer within 60 s"


def test_an_older_file_with_no_clock_starts_at_the_pods_start_unaligned(tmp_path, capsys):
    a = host_file(tmp_path / "a.json", unix_origin_ns=50 * S, events=[("x", 3.0)])
    old = host_file(tmp_path / "old.json", pid=9, clock=False, events=[("x", 40.0)])
    document = merged(tmp_path, a, old)
    assert starts(document) == {("host 0", "x"): 0.0, ("host 1", "x"): 0.0}
    assert "host 1 carries no clock" in capsys.readouterr().out
    assert document["otherData"]["alignment"]["not_aligned"] == [1]


@pytest.mark.parametrize(("last_s", "said"), [(5.0, False), (125.0, True)])
def test_how_long_after_the_measurement_the_events_came_is_said(tmp_path, last_s, said):
    """Host 1 measured 2 s into its recording; its last event ends `last_s` in."""
    a = host_file(tmp_path / "a.json", 0, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0,
                  measured_at_ns=S, events=[("x", 0.0)])  # fmt: skip
    b = host_file(tmp_path / "b.json", 1, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0,
                  measured_at_ns=3 * S, events=[("x", last_s * 1e6 - 10.0)])  # fmt: skip
    alignment = merged(tmp_path, a, b)["otherData"]["alignment"]
    assert alignment["drift_span_s"] == pytest.approx(last_s - 2.0)
    text = f"the offsets were measured up to {last_s - 2.0:,.0f} s before the hosts' last events"
    assert (text in alignment["statement"]) == said


def test_files_of_two_runs_say_so(tmp_path):
    a = host_file(tmp_path / "a.json", 0, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0)
    b = host_file(tmp_path / "b.json", 0, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0,
                  run="r2", pid=5)  # fmt: skip
    document = merged(tmp_path, a, b)
    assert "these files come from 2 runs" in document["otherData"]["alignment"]["statement"]
    assert sorted(h["host"] for h in document["otherData"]["hosts"]) == [0, 1]


def test_a_real_recording_with_workers_keeps_every_track(tmp_path):
    ds = tpufeed.Dataset.from_sequence(range(64)).map(lambda x: x + 1).batch(8)
    with tpufeed.trace(tmp_path / "run.json"):
        for _ in ds.workers(2, isolate=True):
            pass
    own = read_trace(tmp_path / "run.json")
    document = merged(tmp_path, tmp_path / "run.json")
    own_events = [e for e in own["traceEvents"] if e["ph"] != "M"]
    merged_events = [e for e in document["traceEvents"] if e["ph"] != "M"]
    assert len(merged_events) == len(own_events) > 0
    assert {e["pid"] for e in merged_events} == {1}  # one group: the host
    tracks = {(e["pid"], e["tid"]) for e in own_events}
    assert len({e["tid"] for e in merged_events}) == len(tracks)
    names = {e["args"]["name"].split(" (pid")[0] for e in document["traceEvents"]
             if e["name"] == "thread_name"}  # fmt: skip
    assert "tpufeed consumer" in names and names & {"tpufeed worker 0", "tpufeed worker 1"}
    shift = min(e["ts"] for e in merged_events) - min(e["ts"] for e in own_events)
    for mine, theirs in zip(own_events, merged_events):
        assert theirs["ts"] == pytest.approx(mine["ts"] + shift, abs=0.002)
    assert timeline.recording() is None


def test_streaming_in_small_pieces_reads_the_same(tmp_path, monkeypatch):
    """Every value cut across a chunk's end (7 characters a chunk) reads as in one piece."""
    a = host_file(tmp_path / "a.json", unix_origin_ns=S,
                  events=[(f"e{i}", i * 1.25 + 0.001) for i in range(300)])  # fmt: skip
    whole = merged(tmp_path, a)
    monkeypatch.setattr(reader, "CHUNK", 7)
    assert merged(tmp_path, a) == whole


def test_the_json_document(tmp_path):
    a = host_file(tmp_path / "a.json", 0, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0,
                  events=[("x", 1.0)])  # fmt: skip
    b = host_file(tmp_path / "b.json", 1, offset_ns=-S, error_ns=123_456, trace_origin_ns=S,
                  reference_unix_ns=0, events=[("x", 1.0)])  # fmt: skip
    done = run_tpufeed("trace", "merge", a, b, "-o", tmp_path / "pod.json", "--json")
    doc = parsed(done, TRACE_MERGE)
    assert doc["events"] == 2 and doc["alignment"]["max_error_ns"] == 123_456
    # host 0's first event (ts 1 us) starts the merged file; host 1's clock is 1 s behind
    assert [h["shift_us"] for h in doc["hosts"]] == [-1.0, 999_999.0]


def refusal(tmp_path, *paths, output=None) -> str:
    out = str(output or tmp_path / "pod.json")
    with pytest.raises((CorruptDataError, InvalidArgumentError, SourceError)) as caught:
        from tpufeed.cli.trace.merge import merge

        merge([str(p) for p in paths], out)
    assert not os.path.exists(out) or output is not None
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "expected a JSON object (a Chrome trace-event file): the file ends"),
        ("[1, 2]", "expected a JSON object (a Chrome trace-event file), found '[1, 2]'"),
        ('{"a": 1}', "no 'traceEvents' key: not a Chrome trace-event file"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, "pid": 1, "tid": 1}', "the file ends (trunc"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, "pid": 1, "ti', "the file ends inside it"),
        ('{"traceEvents": [3]}', "event 0 is int, not an object"),
        ('{"traceEvents": [{"ts": 1}]}', "trace event 0 has no 'ph'"),
        ('{"traceEvents": [{"ph": "X", "ts": "1"}]}', "trace event 0 has ts '1', not a finite"),
        ('{"traceEvents": []} x', "data after the document's end"),
        ('{"traceEvents": [], "otherData": {"clock": 5}}', "otherData.clock is 5: not an obj"),
        ('{"traceEvents": [], "otherData": {"pod_clock": {"offset_ns": 1.5}}}', "is 1.5: not a"),
        ('{"traceEvents": [], "traceEvents": []}', "a second 'traceEvents' key"),
    ],
)
def test_a_file_that_is_no_trace_is_named_with_why(tmp_path, text, why):
    (tmp_path / "bad.json").write_text(text)
    message = refusal(tmp_path, tmp_path / "bad.json")
    assert message.startswith(f"{tmp_path / 'bad.json'}: ")
    assert why in message


def test_bytes_that_are_not_utf8_are_named(tmp_path):
    (tmp_path / "bad.json").write_bytes(b'{"traceEvents": ["\xff"]}')
    assert "not UTF-8 text" in refusal(tmp_path, tmp_path / "bad.json")


def test_one_value_past_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_VALUE", 100)
    monkeypatch.setattr(reader, "CHUNK", 64)
    big = {"ph": "X", "ts": 1, "name": "n" * 500}
    (tmp_path / "big.json").write_text(json.dumps({"traceEvents": [big]}))
    assert "event 0 is longer than 100 characters" in refusal(tmp_path, tmp_path / "big.json")


def test_the_same_host_twice_is_named(tmp_path):
    a = host_file(tmp_path / "a.json", 1, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0)
    b = host_file(tmp_path / "b.json", 1, offset_ns=0, trace_origin_ns=S, reference_unix_ns=0,
                  pid=5)  # fmt: skip
    assert refusal(tmp_path, a, b) == (
        f"{a} and {b} are the same host (process 1 of one run): give one trace file per host "
        "(the file of each host's process)"
    )
    c = host_file(tmp_path / "c.json", unix_origin_ns=1, pid=77, hostname="same")
    d = host_file(tmp_path / "d.json", unix_origin_ns=2, pid=77, hostname="same")
    assert "are the same host (same pid 77)" in refusal(tmp_path, c, d)
    assert "is given twice" in refusal(tmp_path, c, tmp_path / "." / "c.json")


def test_an_output_among_the_inputs_is_refused(tmp_path):
    a = host_file(tmp_path / "a.json", unix_origin_ns=1)
    before = (tmp_path / "a.json").read_text()
    assert "is one of the files to merge" in refusal(tmp_path, a, output=a)
    assert (tmp_path / "a.json").read_text() == before


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(refusal(tmp_path, tmp_path / "fifo.json")))
    worker.start()
    worker.join(10)
    assert done and "FIFO" in done[0]


def test_a_missing_file_is_named(tmp_path):
    assert refusal(tmp_path, tmp_path / "nope.json") == f"no such file: {tmp_path / 'nope.json'}"
