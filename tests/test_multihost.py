"""Real multi-process JAX runs on localhost (issue 5 item 3, DESIGN "Real components").

2 and 4 processes, each with 2 CPU devices, initialise `jax.distributed` and feed their own
`.shard()` of one shuffled dataset into global arrays through `to_jax`. A jitted reduction over
each global batch (a collective across processes, gloo) counts every record id; each epoch's
counts must all be 1. A state taken at step k of the 4-process run resumes in a 2-process run,
and the two runs together still see every record of that epoch exactly once.

This file is also the worker: `python tests/test_multihost.py worker ...`.
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


def launch(processes: int, out: Path, *, checkpoint_at: int = 0, resume: Path | None = None) -> list[dict]:
    """Runs `processes` workers to completion; kills them all if one fails or time runs out.

    The coordinator port is picked free just before; if another program takes it in between,
    the run is retried once on a new port."""
    try:
        return _launch_once(processes, out, checkpoint_at, resume)
    except AssertionError as e:
        if "address already in use" not in str(e).lower():
            raise
        return _launch_once(processes, out, checkpoint_at, resume)


def _launch_once(processes: int, out: Path, checkpoint_at: int, resume: Path | None) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ,
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES_PER_PROCESS}",
           "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    port = _free_port()
    children = []
    for pid in range(processes):
        args = [sys.executable, __file__, "worker", str(pid), str(processes), str(port), str(out),
                str(checkpoint_at), str(resume or "")]
        log = open(out / f"log-{pid}.txt", "w")
        children.append((subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            codes = [p.poll() for p, _ in children]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = f"process {failed[0]} exited with {codes[failed[0]]}" if failed else \
                    f"timed out after {TIMEOUT_S} s"
                raise AssertionError(f"{processes}-process run failed: {why}\n" + _logs(out, processes))
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
    return launch(4, tmp_path_factory.mktemp("four"), checkpoint_at=CHECKPOINT_STEP)


def _assert_exactly_once(results: list[dict], processes: int) -> None:
    first = results[0]
    assert all(r["counts"] == first["counts"] for r in results), "processes disagree on counts"
    assert sorted(first["counts"]) == [str(e) for e in range(EPOCHS)]
    for epoch, counts in first["counts"].items():
        assert counts == [1] * N, f"epoch {epoch}: records seen {sorted(set(counts))} times"
    assert first["global_shape"] == [BATCH * processes]
    assert first["steps"] == EPOCHS * N // (BATCH * processes)


def test_two_processes_see_every_record_exactly_once_per_epoch(tmp_path):
    _assert_exactly_once(launch(2, tmp_path), 2)


def test_four_processes_see_every_record_exactly_once_per_epoch(four_processes):
    _assert_exactly_once(four_processes, 4)


def test_checkpoint_of_four_processes_resumes_on_two(four_processes, tmp_path):
    checkpoint = four_processes[0]["checkpoint"]
    assert checkpoint["state"]["consumed"] == CHECKPOINT_STEP * BATCH
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(checkpoint["state"]))
    resumed = launch(2, tmp_path / "two", resume=state_file)
    counts = resumed[0]["counts"]
    assert all(r["counts"] == counts for r in resumed)
    rest_of_epoch = [a + b for a, b in zip(checkpoint["counts"], counts["0"])]
    assert rest_of_epoch == [1] * N
    assert counts["1"] == [1] * N
    steps_left = (N - CHECKPOINT_STEP * BATCH * 4) // (BATCH * 2) + N // (BATCH * 2)
    assert resumed[0]["steps"] == steps_left


def test_misfits_are_named_on_every_process_before_any_step(tmp_path):
    results = launch(2, tmp_path, checkpoint_at=-1)
    for pid, r in enumerate(results):
        assert f"process {pid} of 2" in r["misfit"] and "multiple of 2" in r["misfit"], r["misfit"]
        assert "[6, 5]" in r["lockstep"], r["lockstep"]


# -- the worker -------------------------------------------------------------------------------

def _worker(pid: int, processes: int, port: int, out: Path, checkpoint_at: int, resume: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    import tpufeed

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=processes,
                               process_id=pid, initialization_timeout=60)
    if checkpoint_at < 0:
        _checks(pid, out)
        return
    ds = (tpufeed.Dataset.from_sequence(list(range(N))).shuffle(SEED).shard()
          .map(lambda r: {"id": np.int32(r)}).batch(BATCH, drop_remainder=True).repeat(EPOCHS))
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
            result["checkpoint"] = {"state": it.get_state(),
                                    "counts": np.asarray(counts[epoch].addressable_data(0)).tolist()}
    result["counts"] = {str(e): np.asarray(c.addressable_data(0)).tolist() for e, c in counts.items()}
    result["wait_fraction"] = it.wait_fraction
    (out / f"result-{pid}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


def _checks(pid: int, out: Path) -> None:
    """Errors raised before any transfer or step: a batch that does not split over this
    process's devices, and shares that would give the processes unequal batch counts."""
    import jax
    import numpy as np

    import tpufeed
    from tpufeed.errors import InvalidArgumentError

    base = tpufeed.Dataset.from_sequence(list(range(N))).shard().map(lambda r: {"id": np.int32(r)})
    result = {}
    for name, ds in (("misfit", base.batch(3, drop_remainder=True)),
                     ("lockstep", tpufeed.Dataset.from_sequence(list(range(21))).shard()
                      .map(lambda r: {"id": np.int32(r)}).batch(2))):
        try:
            next(ds.to_jax())
            result[name] = "no error"
        except InvalidArgumentError as e:
            result[name] = str(e)
    (out / f"result-{pid}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    _worker(int(a[0]), int(a[1]), int(a[2]), Path(a[3]), int(a[4]), a[5])
