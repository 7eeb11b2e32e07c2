"""Real multi-process JAX runs on localhost (DESIGN "Real components", semantics 1, 5 and 8).

2, 3 and 4 processes, each with 2 CPU devices, initialise `jax.distributed` and feed their own
`.shard()` of one shuffled dataset into global arrays through `to_jax`. A jitted reduction over
each global batch (a collective across processes, gloo) counts every record id; each epoch's
counts must all be 1. A state taken at step k of the 4-process run resumes in a 2-process run,
and the two runs together still see every record of that epoch exactly once. Processes whose
filters keep different counts end every epoch at the same step ("shortest" and "pad"), and the
states of all 3 processes of such a run resume exactly on 2.

This file is also the worker: `python tests/semantics/test_multihost.py worker ...`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

N, BATCH, EPOCHS, SEED = 96, 4, 2, 3
CHECKPOINT_STEP = 3
DEVICES_PER_PROCESS = 2
TIMEOUT_S = 150

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


# -- the launcher -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(processes: int, out: Path, **spec) -> list[dict]:
    """Runs `processes` workers to completion; kills them all if one fails or time runs out.

    `spec` tells the workers what to run (`run`: "train", "checks" or "uneven"; see `_worker`).
    The coordinator port is picked free just before; if another program takes it in between,
    the run is retried once on a new port."""
    try:
        return _launch_once(processes, out, spec)
    except AssertionError as e:
        if "address already in use" not in str(e).lower():
            raise
        return _launch_once(processes, out, spec)


def _launch_once(processes: int, out: Path, spec: dict) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES_PER_PROCESS}",
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    port = _free_port()
    children = []
    for pid in range(processes):
        args = [
            sys.executable,
            __file__,
            "worker",
            str(pid),
            str(processes),
            str(port),
            str(out),
            json.dumps(spec, default=str),
        ]
        log = open(out / f"log-{pid}.txt", "w")
        children.append(
            (subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            codes = [p.poll() for p, _ in children]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = (
                    f"process {failed[0]} exited with {codes[failed[0]]}"
                    if failed
                    else f"timed out after {TIMEOUT_S} s"
                )
                raise AssertionError(
                    f"{processes}-process run failed: {why}\n" + _logs(out, processes)
                )
            if all(c == 0 for c in codes):
                break
            time.sleep(0.1)
    finally:
        for p, log in children:
            if p.poll() is None:
                p.kill()
            p.wait()
            log.close()
    return [json.loads((out / f"result-{pid}.json").read_text()) for pid in range(processes)]


def _logs(out: Path, processes: int) -> str:
    parts = []
    for pid in range(processes):
        path = out / f"log-{pid}.txt"
        text = path.read_text() if path.exists() else "(no log)"
        parts.append(f"--- process {pid} ---\n{text[-3000:]}")
    return "\n".join(parts)


# -- the tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def four_processes(tmp_path_factory) -> list[dict]:
    return launch(4, tmp_path_factory.mktemp("four"), run="train", checkpoint_at=CHECKPOINT_STEP)


def _assert_exactly_once(results: list[dict], processes: int) -> None:
    first = results[0]
    assert all(r["counts"] == first["counts"] for r in results), "processes disagree on counts"
    assert sorted(first["counts"]) == [str(e) for e in range(EPOCHS)]
    for epoch, counts in first["counts"].items():
        assert counts == [1] * N, f"epoch {epoch}: records seen {sorted(set(counts))} times"
    assert first["global_shape"] == [BATCH * processes]
    assert first["steps"] == EPOCHS * N // (BATCH * processes)


def test_two_processes_see_every_record_exactly_once_per_epoch(tmp_path):
    _assert_exactly_once(launch(2, tmp_path, run="train"), 2)


def test_four_processes_see_every_record_exactly_once_per_epoch(four_processes):
    _assert_exactly_once(four_processes, 4)


def test_checkpoint_of_four_processes_resumes_on_two(four_processes, tmp_path):
    checkpoint = four_processes[0]["checkpoint"]
    assert checkpoint["state"]["consumed"] == CHECKPOINT_STEP * BATCH
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(checkpoint["state"]))
    resumed = launch(2, tmp_path / "two", run="train", resume=str(state_file))
    counts = resumed[0]["counts"]
    assert all(r["counts"] == counts for r in resumed)
    rest_of_epoch = [a + b for a, b in zip(checkpoint["counts"], counts["0"])]
    assert rest_of_epoch == [1] * N
    assert counts["1"] == [1] * N
    steps_left = (N - CHECKPOINT_STEP * BATCH * 4) // (BATCH * 2) + N // (BATCH * 2)
    assert resumed[0]["steps"] == steps_left


def test_misfits_are_named_on_every_process_before_any_step(tmp_path):
    results = launch(2, tmp_path, run="checks")
    for pid, r in enumerate(results):
        assert f"process {pid} of 2" in r["misfit"] and "multiple of 2" in r["misfit"], r["misfit"]
        # 21 records: 11 and 10, so 6 and 5 batches of 2; "shortest" ends both at 5 steps.
        assert r["uneven_shard_steps"] == 5 and r["uneven_shard_cut"] == [1, 0][pid]


# -- processes whose counts differ (filters): they end every epoch together --------------------

UNEVEN_N, UNEVEN_EPOCHS, UNEVEN_CHECKPOINT = 120, 2, 2


def kept(i: int) -> bool:
    return (i * 7) % 10 < 6


def _assert_ended_together(results: list[dict], processes: int, mode: str) -> None:
    runs = [r[mode] for r in results]
    own = [r["own_batches"] for r in results]
    assert len(set(map(tuple, own))) > 1, f"the filter kept equal counts everywhere: {own}"
    assert len({r["steps"] for r in runs}) == 1
    kept_ids = [int(kept(i)) for i in range(UNEVEN_N)]
    for epoch in range(UNEVEN_EPOCHS):
        counts = runs[0]["counts"][str(epoch)]
        assert all(r["counts"][str(epoch)] == counts for r in runs)
        if mode == "pad":  # every kept record once, nothing else
            assert counts == kept_ids
        else:  # nothing twice, nothing filtered; the longer processes' extra batches were cut
            assert all(c <= k for c, k in zip(counts, kept_ids))
    if mode == "pad":
        steps = sum(max(o[e] for o in own) for e in range(UNEVEN_EPOCHS))
        assert runs[0]["steps"] == steps
        assert sum(r["padded_rows"] for r in runs) > 0
    else:
        full = [r["own_full_batches"] for r in results]  # a short batch ends an epoch too
        steps = sum(min(o[e] for o in full) for e in range(UNEVEN_EPOCHS))
        assert runs[0]["steps"] == steps
        delivered = sum(sum(r["counts"][str(e)]) for r in runs[:1] for e in range(UNEVEN_EPOCHS))
        cut = sum(r["cut_records"] for r in runs)
        assert delivered + cut == sum(kept_ids) * UNEVEN_EPOCHS
    assert all(0 < r["agreements"] < r["steps"] for r in runs)  # several steps per agreement


@pytest.fixture(scope="module")
def three_uneven(tmp_path_factory) -> list[dict]:
    return launch(
        3, tmp_path_factory.mktemp("uneven3"), run="uneven", checkpoint_at=UNEVEN_CHECKPOINT
    )


@pytest.mark.parametrize("mode", ["shortest", "pad"])
def test_two_processes_with_uneven_filters_end_every_epoch_together(tmp_path, mode):
    _assert_ended_together(launch(2, tmp_path, run="uneven"), 2, mode)


@pytest.mark.parametrize("mode", ["shortest", "pad"])
def test_three_processes_with_uneven_filters_end_every_epoch_together(three_uneven, mode):
    _assert_ended_together(three_uneven, 3, mode)


def test_all_states_of_three_uneven_processes_resume_exactly_on_two(three_uneven, tmp_path):
    states = [r["pad"]["checkpoint"]["state"] for r in three_uneven]
    assert len({json.dumps(s, sort_keys=True) for s in states}) == 3
    state_file = tmp_path / "states.json"
    state_file.write_text(json.dumps(states))
    resumed = launch(2, tmp_path / "two", run="uneven", modes=["pad"], resume=str(state_file))
    before = three_uneven[0]["pad"]["checkpoint"]["counts"]
    after = resumed[0]["pad"]["counts"]
    kept_ids = [int(kept(i)) for i in range(UNEVEN_N)]
    assert [a + b for a, b in zip(before, after["0"])] == kept_ids
    assert after["1"] == kept_ids


# -- the worker -------------------------------------------------------------------------------


def _worker(pid: int, processes: int, port: int, out: Path, spec: dict) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=processes,
        process_id=pid,
        initialization_timeout=60,
    )
    result = {"checks": _checks, "train": _train, "uneven": _uneven}[spec["run"]](spec)
    (out / f"result-{pid}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


def _train(spec: dict) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    import tpufeed

    checkpoint_at, resume = spec.get("checkpoint_at", 0), spec.get("resume")
    ds = (
        tpufeed.Dataset.from_sequence(list(range(N)))
        .shuffle(SEED)
        .shard()
        .map(lambda r: {"id": np.int32(r)})
        .batch(BATCH, drop_remainder=True)
        .repeat(EPOCHS)
    )
    it = ds.to_jax(prefetch=2)
    if resume:
        it.set_state(json.loads(Path(resume).read_text()))
    replicated = NamedSharding(it.sharding.mesh, PartitionSpec())
    count = jax.jit(lambda acc, ids: acc.at[ids].add(1), out_shardings=replicated)
    counts: dict[int, jax.Array] = {}
    result: dict = {"steps": 0}
    for batch in it:
        epoch = it.get_state()["epoch"]
        acc = counts.get(epoch)
        if acc is None:
            acc = jax.device_put(jnp.zeros(N, jnp.int32), replicated)
        counts[epoch] = count(acc, batch["id"])
        result["steps"] += 1
        result["global_shape"] = list(batch["id"].shape)
        if result["steps"] == checkpoint_at:
            result["checkpoint"] = {
                "state": it.get_state(),
                "counts": np.asarray(counts[epoch].addressable_data(0)).tolist(),
            }
    result["counts"] = {
        str(e): np.asarray(c.addressable_data(0)).tolist() for e, c in counts.items()
    }
    result["wait_fraction"] = it.wait_fraction
    return result


def _checks(spec: dict) -> dict:
    """A batch that does not split over this process's devices is named before any transfer;
    shares that give the processes unequal batch counts end together."""
    import numpy as np

    import tpufeed
    from tpufeed.errors import InvalidArgumentError

    base = tpufeed.Dataset.from_sequence(list(range(N))).shard().map(lambda r: {"id": np.int32(r)})
    result = {}
    try:
        next(base.batch(3, drop_remainder=True).to_jax())
        result["misfit"] = "no error"
    except InvalidArgumentError as e:
        result["misfit"] = str(e)
    it = (
        tpufeed.Dataset.from_sequence(list(range(21)))
        .shard()
        .map(lambda r: {"id": np.int32(r)})
        .batch(2)
        .to_jax()
    )
    result["uneven_shard_steps"] = sum(1 for _ in it)
    result["uneven_shard_cut"] = it.stats().cut_batches
    return result


def _uneven(spec: dict) -> dict:
    """Each mode in turn: a filtered dataset whose processes keep different counts, through
    to_jax(uneven=mode); a jitted scatter-add over the global batch counts every record id."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    import tpufeed

    ds = (
        tpufeed.Dataset.from_sequence(list(range(UNEVEN_N)))
        .shuffle(SEED)
        .shard()
        .map(lambda r: {"id": np.int32(r)})
        .filter(lambda e: kept(int(e["id"])))
        .batch(BATCH)
        .repeat(UNEVEN_EPOCHS)
    )
    own = ds.iterator()
    result: dict = {"own_batches": [0] * UNEVEN_EPOCHS, "own_full_batches": [0] * UNEVEN_EPOCHS}
    for batch in own:
        result["own_batches"][own.get_state()["epoch"]] += 1
        result["own_full_batches"][own.get_state()["epoch"]] += len(batch["id"]) == BATCH
    resume = json.loads(Path(spec["resume"]).read_text()) if spec.get("resume") else None
    for mode in spec.get("modes", ["shortest", "pad"]):
        it = ds.to_jax(uneven=mode, state=resume)
        replicated = NamedSharding(it.sharding.mesh, PartitionSpec())
        count = jax.jit(lambda acc, ids, w: acc.at[ids].add(w), out_shardings=replicated)
        counts: dict = {}
        run: dict = {"steps": 0}
        for batch in it:
            epoch = it.get_state()["epoch"]
            acc = counts.get(epoch)
            if acc is None:
                acc = jax.device_put(jnp.zeros(UNEVEN_N, jnp.int32), replicated)
            weight = (
                batch["mask"].astype(jnp.int32) if mode == "pad" else jnp.ones_like(batch["id"])
            )
            counts[epoch] = count(acc, batch["id"], weight)
            run["steps"] += 1
            if run["steps"] == spec.get("checkpoint_at"):
                run["checkpoint"] = {
                    "state": it.get_state(),
                    "counts": np.asarray(counts[epoch].addressable_data(0)).tolist(),
                }
        stats = it.stats()
        run["counts"] = {
            str(e): np.asarray(c.addressable_data(0)).tolist() for e, c in counts.items()
        }
        run.update(
            cut_records=stats.dropped_records,
            padded_rows=stats.padded_rows,
            agreements=stats.agreements,
            agreement_ms=1e3 * stats.agreement_seconds / max(1, stats.agreements),
        )
        result[mode] = run
    return result


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    _worker(int(a[0]), int(a[1]), int(a[2]), Path(a[3]), json.loads(a[4]))
