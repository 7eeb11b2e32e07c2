"""Profiler spans: a real `jax.profiler.trace` and a real `torch.profiler.profile` around
2-worker pipelines, their `tpufeed/...` spans read back from what each profiler wrote."""

from __future__ import annotations

import glob
import subprocess
import sys
import time

import numpy as np
import pytest

import tpufeed
from tpufeed.observe import profiler


def _slow(x: int) -> dict:
    """A record that takes about 0.2 ms to make (so the workers have work to show)."""
    started = time.perf_counter()
    while time.perf_counter() - started < 0.0002:
        pass
    return {"x": np.full(4, x, np.int64)}


def _pipelines() -> dict[str, tuple[tpufeed.Dataset, str]]:
    """Pipelines whose stream stage runs in the parent, with the span it makes there."""
    records = tpufeed.Dataset.from_sequence(range(256))
    tokens = lambda x: {"tokens": np.arange(1 + x % 7, dtype=np.int32)}  # noqa: E731
    # A filter makes counts depend on the data: the parent cuts the batches, not the workers.
    batched = records.map(_slow).filter(lambda e: e["x"][0] % 5 != 0).batch(8).workers(2)
    packed = records.map(tokens).pack({"tokens": 16}).batch(4).workers(2)
    mixed = tpufeed.Dataset.mix(
        [records.map(_slow).workers(2), records.map(_slow)], weights=[1, 1], on_end="stop"
    ).batch(8)
    return {"batch": (batched, "batch"), "pack": (packed, "pack"), "mix": (mixed, "mix")}


def _jax_lines(trace_dir: str) -> list[list[tuple[str, float, float]]]:
    """Each thread's events (name, start_ns, end_ns) of the host plane JAX wrote."""
    from jax.profiler import ProfileData

    (path,) = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
    plane = ProfileData.from_file(path).find_plane_with_name("/host:CPU")
    return [[(e.name, e.start_ns, e.end_ns) for e in line.events] for line in plane.lines]


def _has(name: str, line: list[tuple[str, float, float]]) -> bool:
    return any(n == name for n, _, _ in line)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["batch", "pack", "mix"])
def test_jax_profiler_shows_the_spans_on_the_consumers_thread(tmp_path, name):
    jax = pytest.importorskip("jax")
    ds, stage = _pipelines()[name]
    with jax.profiler.trace(str(tmp_path)):
        with jax.profiler.TraceAnnotation("test/consumer"):  # marks the consumer's thread
            items = sum(1 for _ in ds)
    (consumer,) = [line for line in _jax_lines(str(tmp_path)) if _has("test/consumer", line)]
    ((_, begun, ended),) = [event for event in consumer if event[0] == "test/consumer"]
    names = [n for n, start, end in consumer if begun <= start <= end <= ended]
    assert names.count("tpufeed/next") == items + 1  # each item, and the end
    assert f"tpufeed/{stage}" in names
    assert profiler.check() is None  # the trace is over: nothing records


@pytest.mark.multiprocess
def test_jax_profiler_shows_the_transfer_to_the_devices(tmp_path):
    jax = pytest.importorskip("jax")
    ds = tpufeed.Dataset.from_sequence(range(64)).map(_slow).batch(8).workers(2)
    with jax.profiler.trace(str(tmp_path)):
        with jax.profiler.TraceAnnotation("test/consumer"):
            with ds.to_jax(prefetch=2) as it:
                batches = sum(1 for _ in it)
    lines = _jax_lines(str(tmp_path))
    (consumer,) = [line for line in lines if _has("test/consumer", line)]
    assert [n for n, _, _ in consumer].count("tpufeed/next") == batches + 1
    transfer = [line for line in lines if _has("tpufeed/to_device", line)]
    assert len(transfer) == 1 and transfer[0] is not consumer  # on the transfer thread
    assert [n for n, _, _ in transfer[0]].count("tpufeed/to_device") == batches


@pytest.mark.multiprocess
def test_torch_profiler_shows_the_spans(tmp_path):
    torch = pytest.importorskip("torch")
    ds, _ = _pipelines()["batch"]
    with torch.profiler.profile() as prof:
        with torch.profiler.record_function("test/consumer"):  # marks the consumer's thread
            items = sum(1 for _ in ds)
    (consumer,) = [e.thread for e in prof.events() if e.name == "test/consumer"]
    events = [e for e in prof.events() if e.name.startswith("tpufeed/")]
    nexts = [e for e in events if e.name == "tpufeed/next"]
    assert len(nexts) == items + 1
    assert {e.thread for e in nexts} == {consumer}
    assert any(e.name == "tpufeed/batch" for e in events)
    assert "tpufeed/next" in {row.key for row in prof.key_averages()}


def test_off_tpufeed_imports_no_framework_and_marks_nothing():
    code = (
        "import sys, tpufeed\n"
        "from tpufeed.observe import profiler\n"
        "ds = tpufeed.Dataset.from_sequence(range(10)).batch(2)\n"
        "assert sum(1 for _ in ds) == 5\n"
        "assert profiler.check() is None and profiler.latest() is None\n"
        "print(sorted(m for m in ('jax', 'torch', 'tensorflow') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_span_made_while_nothing_records_is_one_shared_no_op():
    assert profiler.check() is None
    assert profiler.span("batch") is profiler.span("pack")
