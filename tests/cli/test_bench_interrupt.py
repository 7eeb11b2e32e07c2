"""Ctrl-C in `tpufeed bench` prints what it measured until then (issue 47: it threw the run
away), exits 130 and leaves no worker process; the real command is interrupted by SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.processes import default_ctrl_c

TARGET = textwrap.dedent("""
    import os, time, numpy as np, tpufeed

    MARK = os.environ["BENCH_MARK"]

    def slow(i):
        time.sleep(0.01)
        if i == 40:  # the test interrupts once this many elements were made
            open(MARK, "w").close()
        return np.full(4, i)

    def make_dataset():
        return tpufeed.Dataset.from_sequence(list(range(10**6))).map(slow).batch(4)
""")


def interrupted_bench(tmp_path, *args):
    (tmp_path / "pipeline.py").write_text(TARGET)
    mark = tmp_path / "mark"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpufeed.cli", "bench", "pipeline.py:make_dataset", *args],
        cwd=tmp_path,
        env={**os.environ, "BENCH_MARK": str(mark)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"processes left: {alive}"
    return proc.returncode, out, err


@pytest.mark.slow
def test_ctrl_c_prints_the_partial_summary_and_exits_130(tmp_path):
    code, out, err = interrupted_bench(tmp_path, "--seconds", "60")
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    counted = err.splitlines()[-1]
    assert counted.startswith("tpufeed: interrupted: the summary covers the ")
    assert counted.endswith(" batches before Ctrl-C")
    batches = int(counted.split("covers the ")[1].split()[0])
    assert batches >= 5
    assert f"records in {batches} batches over " in out and "<- bottleneck" in out
    assert "no --step-time: " in out  # a verdict on the batches measured


@pytest.mark.slow
@pytest.mark.multiprocess
def test_ctrl_c_with_workers_gives_the_json_document_too(tmp_path):
    code, out, err = interrupted_bench(tmp_path, "--seconds", "60", "--workers", "2", "--json")
    assert code == 130, err
    document = json.loads(out)
    assert document["interrupted"] is True and document["stats"]["batches"] >= 1
    assert document["verdict"]["tried"] is None
    assert err.splitlines()[-1].endswith(" before Ctrl-C")
