"""Property: every parser of outside bytes ends each damaged file in the right records or a named
`tpufeed` error; never another exception, never a hang, never wrong data, within memory.

A seeded fuzz per format (`parser_layouts`: TFRecord and its stream reader and offset index,
ArrayRecord, Parquet, a built dataset's manifest and shards through `Dataset.open`, the
build's JSONL and CSV, JPEG headers, WebDataset tar shards and their sample index, MDS shards,
`index.json`, zstd shards and their decompressed copies: `mds_layouts`; WebDataset's tenbin,
cbor and msgpack fields, gzip shards and their decompressed copies: `wds_layouts`): a cut at
every header boundary, then byte flips across
the headers and framing, `200 x TPUFEED_FUZZ_SCALE` cases in all (`tests/fuzz_all.sh`; the
seed is TPUFEED_FUZZ_SEED, 43 by default). Each format runs in a process of its own
(`parser_cases`), which must finish every case within `CASE_S`: a parser that hangs, or a
native library that aborts, fails the test naming the case. Formats that hold no checksum
(JSONL, CSV, a JPEG's header) may read a flipped byte as another value: those cases are
counted as "different", not failed, since no reader can tell them from data.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.budget import SCALE, TIMEOUT_S
from tests.faults.parser_layouts import LAYOUTS

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(TIMEOUT_S)]

ROOT = Path(__file__).resolve().parents[2]
CASES = 200 * SCALE
SEED = int(os.environ.get("TPUFEED_FUZZ_SEED", "43"))
CASE_S = 30.0  # one case's bound: each takes milliseconds; a hang fails here
START_S = 120.0  # the process's imports and its pristine file
MAX_RSS_KIB = 1 << 20  # 1 GiB: the pristine files are a few KiB; a parser that trusts a size
ACCEPTED = {"right", "named", "refused", "different"}


def run_fuzz(fmt: str, workdir: Path) -> list[dict[str, Any]]:
    """Every case's outcome line; fails naming the case that hung or crashed the process."""
    errors = open(workdir / "stderr.txt", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.parser_cases", fmt, str(SEED), str(CASES)]
        + [str(workdir / "cases")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc, lines), daemon=True)
    reader.start()
    outcomes: list[dict[str, Any]] = []
    current = "the process's start"
    try:
        while True:
            try:
                line = lines.get(timeout=START_S if not outcomes else CASE_S)
            except queue.Empty:
                pytest.fail(f"{fmt}: {current} did not end within {CASE_S:.0f} s (a hang)")
            if line is None:
                break
            item = json.loads(line)
            if item.get("done"):
                break
            if "outcome" in item:
                outcomes.append(item)
            current = f"case {item['case']} ({item['what']})"
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errors.seek(0)
    assert code == 0, f"{fmt}: the process ended with {code} in {current}:\n{errors.read()[-3000:]}"
    return outcomes


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_damaged_headers_read_right_or_raise_a_named_error(fmt, tmp_path):
    outcomes = run_fuzz(fmt, tmp_path)
    assert len(outcomes) == CASES
    tally = Counter(item["outcome"] for item in outcomes)
    bad = [item for item in outcomes if item["outcome"] not in ACCEPTED]
    assert not bad, f"{fmt}: {dict(tally)}; first failures: {bad[:5]}"
    heavy = [item for item in outcomes if item["max_rss_kib"] > MAX_RSS_KIB]
    assert not heavy, f"{fmt}: memory passed {MAX_RSS_KIB} KiB in {heavy[0]}"
    layout = LAYOUTS[fmt]()
    if layout.derived:  # each damaged index: removed with a warning, made again, read right
        unseen = [item for item in outcomes if item["outcome"] != "right" or not item["removed"]]
        assert not unseen, f"{fmt}: a damaged derived file was not replaced: {unseen[:3]}"
    else:  # the damage was seen: not a fuzz of nothing
        assert tally["named"] + tally["refused"] > 0
    if layout.checksummed:
        assert tally["different"] == 0
