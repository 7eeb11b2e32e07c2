"""`to_jax` on 8 CPU devices (issue 5 item 1).

JAX reads XLA_FLAGS once, at import, and other tests may import it first with one device, so the
cases below run in one child process with 8 devices; each pytest test reports its own case.
This file is also that child: `python tests/adapters/test_jax.py child`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections import namedtuple

import numpy as np
import pytest

import tpufeed

N = 100
CASES: dict = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def make(n=N, batch=16, drop=True, epochs=1, prefetch=0, extra=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n))).shuffle(5)
    ds = ds.map(lambda r: {"id": np.int32(r), "x": np.full((3,), r, np.float32)})
    if extra is not None:
        ds = extra(ds)
    return ds.batch(batch, drop_remainder=drop).repeat(epochs).prefetch(prefetch)


def ids(batches):
    return [i for b in batches for i in np.asarray(b["id"]).tolist()]


# -- cases run in the 8-device child ----------------------------------------------------------


@case
def default_sharding_splits_the_batch_over_all_devices():
    import jax
    from jax.sharding import PartitionSpec

    it = make().to_jax()
    batch = next(it)
    assert jax.device_count() == 8
    for leaf, shape in ((batch["id"], (16,)), (batch["x"], (16, 3))):
        assert isinstance(leaf, jax.Array) and leaf.shape == shape
        assert leaf.sharding.spec == PartitionSpec("data")
        assert len(leaf.addressable_shards) == 8
        assert {s.data.shape[0] for s in leaf.addressable_shards} == {2}
    expected = next(iter(make()))
    assert np.asarray(batch["id"]).tolist() == expected["id"].tolist()
    assert np.array_equal(np.asarray(batch["x"]), expected["x"])
    it.close()


@case
def same_batches_as_the_numpy_pipeline_at_every_prefetch_depth():
    expected = ids(make(epochs=2))
    for prefetch in (0, 1, 2, 4):
        with make(epochs=2).to_jax(prefetch=prefetch) as it:
            assert ids(it) == expected, prefetch


@case
def named_shardings_on_a_2d_mesh():
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    rows = lambda ds: ds.map(lambda e: {"x": e["id"] * 10 + np.arange(4, dtype=np.int32)})  # noqa: E731
    expected = next(iter(make(extra=rows)))["x"]
    for spec, shard_shape in (
        (P("data"), (4, 4)),
        (P(("data", "model")), (2, 4)),
        (P("data", "model"), (4, 2)),
    ):
        batch = next(make(extra=rows).to_jax(NamedSharding(mesh, spec)))
        assert batch["x"].shape == (16, 4) and batch["x"].sharding.spec == spec
        assert {s.data.shape for s in batch["x"].addressable_shards} == {shard_shape}, spec
        assert np.array_equal(np.asarray(batch["x"]), expected)


@case
def structure_of_the_batch_is_kept():
    Pair = namedtuple("Pair", "a b")
    for to_structure in (lambda e: (e["id"], [e["x"]]), lambda e: Pair(e["id"], {"x": e["x"]})):
        ds = (
            tpufeed.Dataset.from_sequence(list(range(16)))
            .map(lambda r: {"id": np.int32(r), "x": np.zeros(2, np.float32)})
            .map(to_structure)
            .batch(8)
        )
        batch = next(ds.to_jax())
        first = next(iter(ds))
        assert type(batch) is type(first)
        assert np.asarray(batch[0]).tolist() == first[0].tolist()


@case
def state_counts_only_the_batches_the_loop_received():
    ds = make(n=96, batch=8, epochs=3)
    expected = ids(ds)
    for stop in (0, 3, 12, 20):  # 12 batches an epoch: 12 and 20 cross epoch boundaries
        it = ds.to_jax(prefetch=4)
        got = ids(next(it) for _ in range(stop))
        time.sleep(0.05)  # let the thread run ahead: the state must not move with it
        state = it.get_state()
        assert state["consumed"] == (stop % 12) * 8 or (stop % 12 == 0 and state["consumed"] == 96)
        json.dumps(state)
        it.close()
        assert got + ids(ds.to_jax(state=state)) == expected
        again = ds.to_jax(prefetch=2)
        next(again)
        again.set_state(state)
        assert ids(again) == expected[stop * 8 :]


@case
def set_state_on_a_live_iterator_drops_what_was_transferred_ahead():
    from tpufeed.errors import StateError

    ds = make(epochs=2, prefetch=2, extra=lambda d: d.filter(lambda e: e["id"] % 7 != 3))
    expected = ids(ds)
    it = ds.to_jax(prefetch=4)
    got = ids(next(it) for _ in range(2))
    state = it.get_state()
    ids(next(it) for _ in range(3))
    time.sleep(0.05)  # the transfer thread runs ahead
    it.set_state(state)
    again = ids(next(it) for _ in range(2))
    assert got + again == expected[: 4 * 16]
    before = it.get_state()
    try:  # a state of another pipeline: refused, and the iterator goes on where it was
        it.set_state(make().iterator().get_state())
        raise AssertionError("a foreign state was taken")
    except StateError:
        pass
    assert it.get_state() == before
    assert got + again + ids(it) == expected
    it.close()


@case
def a_batch_that_does_not_fit_the_sharding_is_named_before_any_transfer():
    from tpufeed.errors import InvalidArgumentError

    try:
        next(make(batch=6).to_jax())
    except InvalidArgumentError as e:
        text = str(e)
        assert "['id']" in text and "(6,)" in text and "multiple of 8" in text, text
        assert "8" in text.split("such as")[1], text
    else:
        raise AssertionError("no error for a batch of 6 on 8 devices")
    it = make(n=40, batch=16, drop=False).to_jax()
    next(it), next(it)
    try:
        next(it)  # the last batch of the epoch holds 8: fits; then none is left
        next(it)
    except StopIteration:
        pass
    try:
        list(make(n=36, batch=16, drop=False).to_jax())  # last batch of 4
    except InvalidArgumentError as e:
        assert "drop_remainder=True" in str(e) and "batch 2" in str(e), str(e)
    else:
        raise AssertionError("no error for a last batch of 4 on 8 devices")


@case
def leaves_jax_cannot_hold_get_a_clear_error():
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from tpufeed.errors import BatchError, InvalidArgumentError

    for value in (b"raw", "text"):
        ds = (
            tpufeed.Dataset.from_sequence(list(range(8)))
            .map(lambda r, v=value: {"id": r, "name": v})
            .batch(8)
        )
        try:
            next(ds.to_jax())
        except BatchError as e:
            assert "['name']" in str(e) and "bytes or str" in str(e), str(e)
        else:
            raise AssertionError(f"no error for a {type(value).__name__} leaf")
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    try:
        next(make().to_jax(NamedSharding(mesh, P("data", "model"))))
    except InvalidArgumentError as e:
        assert "['id']" in str(e) and "(16,)" in str(e), str(e)
    else:
        raise AssertionError("no error for a rank-1 leaf under a 2-dimension spec")
    for bad in ({"sharding": "data"}, {"prefetch": -1}):
        try:
            make().to_jax(**bad)
        except InvalidArgumentError as e:
            assert repr(list(bad.values())[0]) in str(e)
        else:
            raise AssertionError(f"no error for {bad}")


@case
def pipeline_errors_reach_the_loop_and_nothing_is_left_running():
    from tpufeed.errors import TransformError

    def explode(e):
        if int(e["id"]) == 37:
            raise ValueError("bad record")
        return e

    before = set(threading.enumerate())
    for prefetch in (0, 2):
        try:
            list(make(extra=lambda ds: ds.map(explode)).to_jax(prefetch=prefetch))
        except TransformError as e:
            assert "bad record" in str(e) or "bad record" in (e.traceback_text or "")
        else:
            raise AssertionError("the transform error did not reach the loop")
    it = make(epochs=None).to_jax(prefetch=3)
    next(it)
    it.close()
    next(iter(make(epochs=None).to_jax(prefetch=2)))  # dropped without close: __del__ cleans up
    import gc

    gc.collect()
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [t.name for t in set(threading.enumerate()) - before]
    assert not left, left


@case
def wait_fraction_tells_an_input_bound_loop_from_a_compute_bound_one():
    def slow(e):
        time.sleep(0.004)
        return e

    bound = make(n=160, extra=lambda ds: ds.map(slow)).to_jax(prefetch=2)
    for _ in bound:
        pass
    assert bound.wait_fraction > 0.5, bound.wait_fraction
    fed = make(n=160).to_jax(prefetch=2)
    for _ in fed:
        time.sleep(0.03)
    assert fed.wait_fraction < 0.3, fed.wait_fraction
    assert fed.time_to_first_batch is not None and fed.wall_seconds > 0.2
    stats = bound.stats()
    assert stats.stages["to_device"].records == 160 and stats.stages["to_device"].seconds > 0
    assert stats.bottleneck == "map(slow)"
    assert stats.wait_fraction == pytest.approx(bound.wait_fraction)


# -- the pytest side --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def child_results() -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, __file__, "child"], env=env, capture_output=True, text=True, timeout=240
    )
    marker = "RESULTS:"
    lines = [line for line in proc.stdout.splitlines() if line.startswith(marker)]
    if not lines:
        pytest.fail(f"the 8-device child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len(marker) :])


@pytest.mark.parametrize("name", sorted(CASES))
def test_on_8_devices(child_results, name):
    error = child_results[name]
    if error:
        pytest.fail(f"case {name} failed in the 8-device child:\n{error}")


def test_importing_tpufeed_and_iterating_imports_no_framework():
    code = (
        "import sys, tpufeed; list(tpufeed.Dataset.from_sequence(list(range(8))).batch(4)); "
        "print(sorted({'jax', 'tensorflow', 'torch'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def _child() -> None:
    results = {}
    for name, fn in CASES.items():
        try:
            fn()
            results[name] = None
        except BaseException:  # noqa: BLE001 - reported to the parent
            results[name] = traceback.format_exc()
    print("RESULTS:" + json.dumps(results), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    _child()
