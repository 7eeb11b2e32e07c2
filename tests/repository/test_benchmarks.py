"""Smoke test of benchmarks/compare.py: every row runs at a tiny size and lands in the JSON.

The numbers at this size mean nothing; the test checks that each system's pipeline builds,
yields batches of the workload's shape and dtype (measure.py checks the first batch), and covers
every record of every epoch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("workload", ["W1", "W2"])
def test_compare_runs_every_row(tmp_path, workload):
    out = tmp_path / "out.json"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "benchmarks", "compare.py"),
        "--workload",
        workload,
        "--records",
        "600",
        "--passes",
        "1",
        "--workers",
        "2",
        "--json",
        str(out),
        "--data-dir",
        str(tmp_path / "data"),
        "--timeout",
        "120",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())

    import tpufeed

    parallel_tpufeed = hasattr(tpufeed.Dataset, "workers")
    assert list(report["workloads"]) == [workload]
    rows = report["workloads"][workload]["rows"]
    seen = {(r["system"], r["workers"]) for r in rows}
    for system in ("grain-map", "grain-loader", "tfdata", "tfdata-ops", "torch"):
        assert {(system, 0), (system, 2)} <= seen, (system, seen)
    assert {
        ("raw-reader", 0),
        ("bare-loop", 0),
        ("bare-parallel", 2),
        ("tpufeed", 0),
        ("tpufeed-parquet", 0),
        ("tpufeed-parquet", 2),
    } <= seen
    assert ("bare-parallel", 0) not in seen
    assert (("tpufeed", 2) in seen) == parallel_tpufeed
    # The MDS pair runs on W1 only, and only where Streaming's own python is (else a note).
    from benchmarks.compare import row_python

    mds_rows = {(s, w) for s in ("tpufeed-mds", "streaming-mds") for w in (0, 2)}
    streaming = row_python("streaming-mds") is not None
    assert (mds_rows <= seen) == (workload == "W1" and streaming), seen
    assert not (mds_rows & seen) or workload == "W1"
    assert ("streaming-mds (0w) skipped" in proc.stdout) == (workload == "W1" and not streaming)
    for row in rows:
        assert "error" not in row, row
        assert len(row["rates"]) == 1 and row["rate"] > 0 and row["first_batch_s"] > 0
        assert row["rss_main_mib"] > 0
    assert report["workloads"][workload]["summary"]["bare_loop"] > 0
    assert report["workloads"][workload]["summary"]["bare_parallel"] > 0
    assert "| bare-loop | limit |" in proc.stdout
    assert ("CPU limit (bare x" in proc.stdout) == (workload == "W2")


def test_profile_puts_each_sample_in_one_stage(tmp_path):
    from benchmarks.profiling import RATE_HZ, summarise

    raw = tmp_path / "raw.txt"
    head = 'process 1:"python";process 2:"python -m tpufeed.run.workers.worker";Worker.run (w.py:1)'
    raw.write_text(
        f"{head};augment_w2 (workloads.py:41);pad (numpy/_arraypad_impl.py:838) 30\n"
        f"{head};RandomMap.apply_all (map.py:33);RecordRngs.for_record (rng.py:30) 5\n"
        f"{head};ShardedSource.__getitems__ (sharded.py:110) 10\n"
        f"{head};write_stacked (layout.py:60) 4\n"
        f"{head};Connection.recv (connection.py:250) 50\n"
        'process 1:"python";main (x.py:3);dedent (textwrap.py:1) 1\n'
    )
    out = summarise(str(raw), "augment_w2", records=1000)
    assert out["samples"] == 100 and out["processes"] == 2
    assert out["share"] == {
        "transform": 0.30,
        "rng": 0.05,
        "read": 0.10,
        "stack / write slot": 0.04,
        "wait": 0.50,
        "other": 0.01,
    }
    assert out["cpu_s_per_1k_records"]["transform"] == 30 / RATE_HZ


@pytest.mark.slow
@pytest.mark.emulator
def test_gcs_benchmark_prints_every_row(tmp_path):
    pytest.importorskip("gcp_storage_emulator")
    out = tmp_path / "gcs.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.gcs",
        "--records",
        "800",
        "--large-records",
        "16",
        "--large-kib",
        "8",
        "--passes",
        "1",
        "--link",
        "direct",
        "--link",
        "5,200",
        "--data-dir",
        str(tmp_path / "data"),
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    # Exit status 1 says a target was missed, which at this size means nothing.
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [(r["dataset"], r["link"].split(",")[0]) for r in results] == [
        ("W1", "direct to the emulator"),
        ("8KiB", "direct to the emulator"),
        ("W1", "5 ms first byte"),
        ("8KiB", "5 ms first byte"),
    ]
    for r in results:
        assert r["records"] == (800 if r["dataset"] == "W1" else 16)
        assert all(s > 0 for s in r["seconds"].values())
        assert r["window_peak_cache_bytes"] <= r["window_cache_limit"]
    assert proc.stdout.count("bound on cold / limit") == 4
    assert proc.stdout.count("tpufeed warm (full cache)") == 4


@pytest.mark.slow
@pytest.mark.emulator
def test_https_benchmark_runs_every_row_side_by_side(tmp_path):
    pytest.importorskip("gcp_storage_emulator")
    out = tmp_path / "https.json"
    cmd = [sys.executable, "-m", "benchmarks.https", "--records", "800", "--rounds", "3"]
    cmd += ["--data-dir", str(tmp_path / "data"), "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["records"] == 800 and result["rounds"] == 3
    rows = ["local files", "gs:// cold", "gs:// warm", "https:// cold", "https:// warm"]
    assert list(result["epoch_s"]) == list(result["cpu_s"]) == rows
    assert all(len(times) == 3 and min(times) > 0 for times in result["epoch_s"].values())
    assert "https / gs (epoch time, medians): cold" in proc.stdout


@pytest.mark.slow
def test_rounds_pool_each_rows_passes(tmp_path):
    out = tmp_path / "out.json"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "benchmarks", "compare.py"),
        "--workload",
        "W1",
        "--records",
        "600",
        "--passes",
        "2",
        "--rounds",
        "2",
        "--workers",
        "2",
        "--systems",
        "bare-loop,tpufeed",
        "--json",
        str(out),
        "--data-dir",
        str(tmp_path / "data"),
        "--timeout",
        "120",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("round ") == 2
    report = json.loads(out.read_text())
    assert report["settings"]["rounds"] == 2
    rows = report["workloads"]["W1"]["rows"]
    assert [(r["system"], r["workers"]) for r in rows] == [
        ("bare-loop", 0),
        ("tpufeed", 0),
        ("tpufeed", 2),
    ]
    for row in rows:
        assert len(row["rates"]) == 4 and len(row["rounds"]) == 2
        assert sorted(row["rates"]) == sorted(x for r in row["rounds"] for x in r["rates"])
        assert min(row["rates"]) <= row["rate"] <= max(row["rates"])


@pytest.fixture(scope="module")
def w2_tiny(tmp_path_factory):
    from benchmarks.datafiles import prepare
    from benchmarks.workloads import SEED, WORKLOADS

    root = str(tmp_path_factory.mktemp("w2"))
    prepare(WORKLOADS["W2"], 600, root, SEED)
    return root


def _torch_options(**kwargs):
    from benchmarks.systems.torch_system import TorchOptions

    return TorchOptions(**kwargs)


# In a fresh interpreter, as compare.py runs every row: the DataLoader forks its workers from
# the process that iterates, and a fork of the test process (its threads, the readers other
# tests left open) is not what a benchmark row forks. The bare loop runs after the DataLoader,
# so that none of its readers is open when the workers are forked.
_SAME_RECORDS = """
import json, sys
import numpy as np
from benchmarks.datafiles import prepare
from benchmarks.systems import RowSpec
from benchmarks.systems.limits import bare_loop
from benchmarks.systems.torch_system import TorchOptions, batches
from benchmarks.workloads import SEED, WORKLOADS

workers, options, root = json.loads(sys.argv[1])
spec = RowSpec("torch", "W2", workers, 2, SEED, prepare(WORKLOADS["W2"], 600, root, SEED))
got = np.concatenate([b["image"].numpy() for b in batches(spec, TorchOptions(**options))])
expected = np.concatenate([b["image"] for b in bare_loop(spec)])
assert got.shape == (2 * 600, 30, 30, 3), got.shape
np.testing.assert_array_equal(got, expected)
print("same records, same order")
"""


@pytest.mark.parametrize(
    "workers, options",
    [
        (0, {}),
        (0, {"reads": "batch"}),
        (0, {"collate": "default"}),
        pytest.param(2, {}, marks=pytest.mark.multiprocess),
        pytest.param(2, {"sampler": "index", "collate": "numpy"}, marks=pytest.mark.multiprocess),
        pytest.param(
            2, {"epochs": "per-epoch", "persistent_workers": True}, marks=pytest.mark.multiprocess
        ),
    ],
)
def test_torch_row_yields_the_bare_loops_records_in_its_order(w2_tiny, workers, options):
    """Every torch set-up the sweep tries delivers the bare loop's values, record for record."""
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", _SAME_RECORDS, json.dumps([workers, options, w2_tiny])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "same records, same order" in proc.stdout


def test_torch_options_name_the_bad_value():
    with pytest.raises(ValueError, match="'threads'"):
        _torch_options(reads="threads")


@pytest.mark.slow
def test_anchor_variants_sweep_pools_each_variant(tmp_path):
    from benchmarks.anchor_variants import VARIANTS, pick

    assert pick("grain-loader") == [v for v in VARIANTS if v.startswith("grain-loader-")]
    out = tmp_path / "variants.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.anchor_variants",
        "--workload",
        "W1",
        "--variants",
        "torch-row,torch-prefetch2,grain-map-row",
        "--workers",
        "0",
        "--records",
        "600",
        "--passes",
        "1",
        "--rounds",
        "2",
        "--data-dir",
        str(tmp_path / "data"),
        "--json",
        str(out),
        "--timeout",
        "120",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pooled = json.loads(out.read_text())["variants"]
    # torch-prefetch2 changes nothing without workers: not run at 0 workers.
    assert [(p["variant"], p["workers"]) for p in pooled] == [
        ("torch-row", 0),
        ("grain-map-row", 0),
    ]
    for p in pooled:
        assert not p["errors"] and len(p["rates"]) == 2 and p["rate"] > 0
    assert "| torch-row | 0 |" in proc.stdout


@pytest.mark.slow
@pytest.mark.multiprocess
def test_an_observed_tpufeed_row_records_its_timeline_and_is_scraped(tmp_path):
    """versus --observe's rows (TPUFEED_BENCH_OBSERVE=1): the same row, with a timeline file
    written and the metrics served; the rate is still measured."""
    out = tmp_path / "out.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "compare.py"), "--workload", "W1"]
    cmd += ["--records", "600", "--passes", "1", "--workers", "2", "--systems", "tpufeed"]
    cmd += ["--json", str(out), "--data-dir", str(tmp_path / "data"), "--timeout", "120"]
    env = {**os.environ, "TPUFEED_BENCH_OBSERVE": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["workloads"]["W1"]["rows"]
    assert {r["workers"] for r in rows if r["system"] == "tpufeed"} == {0, 2}
    assert all("error" not in r and r["rate"] > 0 for r in rows), rows
    timelines = list(tmp_path.glob("tpufeed-observed-*/run.json"))
    assert timelines, "no timeline written"
    events = json.loads(timelines[0].read_text())["traceEvents"]
    assert any(e["name"] == "next" for e in events)
