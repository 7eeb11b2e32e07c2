"""Property: `tpufeed trace merge` over a damaged trace file writes a merged trace that is strict
JSON, a group per host and a finite time on every event, or raises a named `TpufeedError` and
leaves no output; never another exception, never a hang. The damage: any one place of the
document replaced, nudged, deleted or added (the clock metadata included), the file cut short
at any byte, or any byte overwritten."""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.cli.test_trace_merge import S, host_file
from tests.faults.budget import TIMEOUT_S, examples
from tests.faults.json_mutations import mutated
from tpufeed.cli.trace.merge import merge
from tpufeed.errors import TpufeedError

pytestmark = pytest.mark.timeout(TIMEOUT_S)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Host 0 and host 1 of one run, with offsets, and their documents."""
    root = tmp_path_factory.mktemp("traces")
    a = host_file(root / "a.json", 0, offset_ns=0, trace_origin_ns=10 * S,
                  reference_unix_ns=100 * S, events=[("x", 0.0), ("y", 20.5)])  # fmt: skip
    b = host_file(root / "b.json", 1, offset_ns=5 * S, error_ns=200_000,
                  trace_origin_ns=16 * S, reference_unix_ns=100 * S,
                  unix_origin_ns=S, events=[("x", 1.0)])  # fmt: skip
    return root, a, b


def merged_or_named(root, a, damaged_bytes: bytes) -> None:
    path = root / "damaged.json"
    path.write_bytes(damaged_bytes)
    out = root / "pod.json"
    try:
        merge([a, str(path)], str(out))
    except TpufeedError as e:
        assert str(e)
        assert not out.exists()
        return
    finally:
        path.unlink()
        assert not [p for p in os.listdir(root) if p.endswith(".tmp")]
    document = json.loads(out.read_text(), parse_constant=_refuse)
    out.unlink()
    events = document["traceEvents"]
    groups = {e["pid"] for e in events if e.get("name") == "process_name"}
    assert len(groups) == 2
    for event in events:
        assert event["pid"] in groups
        if event["ph"] != "M":
            assert math.isfinite(event["ts"])


def _refuse(constant: str) -> None:
    raise AssertionError(f"the merged file holds {constant}: not JSON")


@examples(60)
@given(data=st.data())
def test_a_damaged_document_merges_or_is_named(files, data):
    root, a, b = files
    damaged = data.draw(mutated(json.loads(open(b).read())), label="document")
    merged_or_named(root, a, json.dumps(damaged, allow_nan=True).encode())


@examples(40)
@given(data=st.data())
def test_a_cut_or_overwritten_file_merges_or_is_named(files, data):
    root, a, b = files
    original = open(b, "rb").read()
    at = data.draw(st.integers(0, len(original) - 1), label="at")
    if data.draw(st.booleans(), label="cut"):
        damaged = original[:at]
    else:
        damaged = original[:at] + bytes([data.draw(st.integers(0, 255))]) + original[at + 1 :]
    merged_or_named(root, a, damaged)
