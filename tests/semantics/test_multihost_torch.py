"""Real multi-process torch.distributed runs on localhost (issue 31, item 4): hosts end together
without JAX.

2 and 3 processes initialise `torch.distributed` (gloo, tcp://127.0.0.1) and never touch
`jax.distributed`, so `.shard()` takes torch's rank and world size and `uneven=` agrees through
torch.distributed's store (`TorchAgreement`, chosen by default). Each step, every process
all-reduces (on the default gloo group) a histogram of the record ids of its batch: a process
that ran one step more or less would leave that collective waiting, so the run finishing with
equal counts everywhere shows that every epoch ended on the same step, and that the agreement
does not interleave with the training's own collectives. Filtered and packed pipelines, through
`Dataset.iterator` and through `to_torch()` in a DataLoader; what was cut or padded is counted.
A process killed mid-epoch is named by a `HostLostError` on the others, not a hang.

This file is also the worker: `python tests/semantics/test_multihost_torch.py worker ...`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

N, BATCH, EPOCHS, SEED = 120, 4, 2, 3
LENGTH, OPEN_ROWS, PACKED_BATCH = 8, 4, 2  # packed rows: hosts make different counts
LOST_AFTER_S = 3  # TorchAgreement's bound in the fault test (30 s by default)
NAMED = 3  # a worker's exit code once it has written the tpufeed error it got
RUN_S = 150  # the most any one run of processes may take here

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.timeout(400)]


def kept(i: int) -> bool:
    return (i * 7) % 10 < 6


def sequence(i: int) -> list[int]:
    """Record i packed: 1 to 6 tokens, each the record's id + 1 (0 is padding)."""
    return [i + 1] * (1 + (i * 5) % 6)


# -- the launcher -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(processes: int, out: Path, **spec) -> list[dict]:
    """Runs `processes` workers until all exit; kills them all once time runs out. A worker that
    exits with NAMED wrote the tpufeed error it got; any other failure fails the test."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    port = _free_port()
    children = []
    for pid in range(processes):
        args = [sys.executable, __file__, "worker", str(pid), str(processes), str(port)]
        args += [str(out), json.dumps(spec)]
        log = open(out / f"log-{pid}.txt", "w")
        children.append(
            (subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        )
    deadline = time.monotonic() + RUN_S
    victim = spec.get("kill")
    try:
        while any(p.poll() is None for p, _ in children):
            codes = [p.poll() for p, _ in children]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0, NAMED) and i != victim]
            if failed or time.monotonic() > deadline:
                why = f"process {failed[0]} exited with {codes[failed[0]]}" if failed else "hung"
                raise AssertionError(f"{processes}-process run {why}\n" + _logs(out, processes))
            time.sleep(0.1)
    finally:
        for p, log in children:
            if p.poll() is None:
                p.kill()
            p.wait()
            log.close()
    results = []
    for pid in range(processes):
        path = out / f"result-{pid}.json"
        results.append(json.loads(path.read_text()) if path.exists() else None)
    return results


def _logs(out: Path, processes: int) -> str:
    parts = []
    for pid in range(processes):
        path = out / f"log-{pid}.txt"
        text = path.read_text() if path.exists() else "(no log)"
        parts.append(f"--- process {pid} ---\n{text[-3000:]}")
    return "\n".join(parts)


# -- the tests --------------------------------------------------------------------------------


def _assert_ended_together(results: list[dict], mode: str) -> None:
    runs = [r[mode] for r in results]
    own = [r["own_batches"] for r in results]
    assert len(set(map(tuple, own))) > 1, f"the filter kept equal counts everywhere: {own}"
    assert len({tuple(r["epochs"]) for r in runs}) == 1  # the same epoch at every step
    kept_ids = [int(kept(i)) for i in range(N)]
    for epoch in range(EPOCHS):
        counts = runs[0]["counts"][epoch]  # all-reduced: the same on every process
        if mode == "pad":  # every kept record once, nothing else
            assert counts == kept_ids
        else:  # nothing twice, nothing filtered; the longer processes' extra batches were cut
            assert all(c <= k for c, k in zip(counts, kept_ids))
    steps = len(runs[0]["epochs"])
    if mode == "pad":
        assert steps == sum(max(o[e] for o in own) for e in range(EPOCHS))
        assert sum(r["padded_rows"] for r in runs) > 0
    else:
        full = [r["own_full_batches"] for r in results]  # a short batch ends an epoch too
        assert steps == sum(min(o[e] for o in full) for e in range(EPOCHS))
        delivered = sum(sum(runs[0]["counts"][e]) for e in range(EPOCHS))
        cut = sum(r["cut_records"] for r in runs)
        assert delivered + cut == sum(kept_ids) * EPOCHS
    assert all(0 < r["agreements"] < steps for r in runs)  # several steps per agreement


@pytest.mark.parametrize("processes", [2, 3])
def test_filtered_processes_end_every_epoch_together(tmp_path, processes):
    results = launch(processes, tmp_path, run="filtered")
    assert [r["rank"] for r in results] == list(range(processes))
    assert all(r["agreement"] == "TorchAgreement" for r in results)
    for mode in ("shortest", "pad"):
        _assert_ended_together(results, mode)


@pytest.mark.parametrize("processes", [2, 3])
def test_packed_processes_end_every_epoch_together(tmp_path, processes):
    """Packing fills every batch (the last with empty rows), so hosts differ only in how many
    batches they make: "shortest" cuts each host's extra ones, "pad" adds masked ones."""
    results = launch(processes, tmp_path, run="packed")
    own = [r["own_batches"] for r in results]
    assert len(set(map(tuple, own))) > 1, f"packing made equal counts everywhere: {own}"
    tokens = [len(sequence(i)) * kept(i) for i in range(N)]
    for mode in ("shortest", "pad"):
        runs = [r[mode] for r in results]
        assert len({tuple(r["epochs"]) for r in runs}) == 1
        agreed = [(min if mode == "shortest" else max)(o[e] for o in own) for e in range(EPOCHS)]
        assert len(runs[0]["epochs"]) == sum(agreed)
        for run, mine in zip(runs, own):
            extra = sum(abs(mine[e] - agreed[e]) for e in range(EPOCHS))
            assert run["cut_batches" if mode == "shortest" else "padded_batches"] == extra
        for epoch in range(EPOCHS):
            counts = runs[0]["counts"][epoch]
            if mode == "pad":  # every token of every kept record, once
                assert counts == tokens
            else:
                assert all(c <= t for c, t in zip(counts, tokens))


@pytest.mark.parametrize("victim", [2, 0])
def test_a_killed_process_is_named_on_the_others(tmp_path, victim):
    """Process 0 serves torch.distributed's store: its death is named too (as the store that
    stopped answering), where jax.distributed's runtime aborts the other processes."""
    results = launch(3, tmp_path, run="killed", kill=victim)
    assert results[victim] is None  # killed before it wrote anything
    for pid in {0, 1, 2} - {victim}:
        error = results[pid]["error"]
        assert results[pid]["type"] == "HostLostError", error
        assert victim in results[pid]["hosts"], error
        assert ("process 2 stopped answering" if victim else "torch.distributed's store") in error


# -- the worker -------------------------------------------------------------------------------


def _worker(pid: int, processes: int, port: int, out: Path, spec: dict) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=pid,
        world_size=processes,
        timeout=timedelta(seconds=60),
    )
    run = {"filtered": _filtered, "packed": _packed, "killed": _killed}[spec["run"]]
    code = 0
    try:
        result = run(spec)
    except Exception as e:  # noqa: BLE001 - written for the test to read
        result = {"type": type(e).__name__, "error": str(e), "hosts": list(getattr(e, "hosts", ()))}
        code = NAMED
    (out / f"result-{pid}.json").write_text(json.dumps(result))
    survivors = [p for p in range(processes) if p != spec.get("kill")]
    deadline = time.monotonic() + 60
    while code and time.monotonic() < deadline:  # rank 0's store lives until all have named
        if all((out / f"result-{p}.json").exists() for p in survivors):
            break
        time.sleep(0.1)
    if code == 0:
        dist.barrier()  # rank 0 serves the store: it stays until every process has left
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(code)


def _pipeline(packed: bool = False):
    import numpy as np

    import tpufeed

    ds = tpufeed.Dataset.from_sequence(list(range(N))).shuffle(SEED).shard()
    ds = ds.map(lambda r: {"id": np.int64(r)}).filter(lambda e: kept(int(e["id"])))
    if packed:
        ds = ds.map(lambda e: {"tokens": np.array(sequence(int(e["id"])), np.int64)})
        return ds.pack({"tokens": LENGTH}, OPEN_ROWS).batch(PACKED_BATCH).repeat(EPOCHS)
    return ds.batch(BATCH).repeat(EPOCHS)


def _own_batches(ds) -> dict:
    own = ds.iterator()
    result: dict = {"own_batches": [0] * EPOCHS, "own_full_batches": [0] * EPOCHS}
    for batch in own:
        epoch = own.get_state()["epoch"]
        result["own_batches"][epoch] += 1
        result["own_full_batches"][epoch] += len(batch["id"]) == BATCH if "id" in batch else 1
    return result


def _count(batches, ids_and_weights) -> dict:
    """Every step: all-reduce (gloo, the default group) a histogram of this batch's ids."""
    import torch
    import torch.distributed as dist

    counts = torch.zeros(EPOCHS, N, dtype=torch.int64)
    run: dict = {"epochs": []}
    for batch, epoch in batches:
        ids, weights = ids_and_weights(batch)
        step = torch.zeros(N, dtype=torch.int64).index_add_(0, ids, weights)
        dist.all_reduce(step)
        counts[epoch] += step
        run["epochs"].append(epoch)
    run["counts"] = counts.tolist()
    return run


def _stats(run: dict, stats) -> dict:
    run.update(
        cut_records=stats.dropped_records,
        cut_batches=stats.cut_batches,
        padded_rows=stats.padded_rows,
        padded_batches=stats.padded_batches,
        agreements=stats.agreements,
    )
    return run


def _filtered(spec: dict) -> dict:
    """ "shortest" through Dataset.iterator, "pad" through to_torch() in a DataLoader."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    ds = _pipeline()
    result = {"rank": dist.get_rank(), **_own_batches(ds)}
    it = ds.iterator(uneven="shortest")
    batches = ((b, it.get_state()["epoch"]) for b in it)
    result["shortest"] = _stats(
        _count(
            batches,
            lambda b: (torch.as_tensor(b["id"]), torch.ones(len(b["id"]), dtype=torch.int64)),
        ),
        it.stats(),
    )
    result["agreement"] = type(it._run._agreement).__name__
    data = ds.to_torch(uneven="pad")
    loader = iter(DataLoader(data, batch_size=None))
    batches = ((b, data.get_state()["epoch"]) for b in loader)
    run = _count(batches, lambda b: (b["id"], b["mask"].to(torch.int64)))
    result["pad"] = _stats(run, data.stats())
    return result


def _packed(spec: dict) -> dict:
    import torch

    result = _own_batches(_pipeline(packed=True))
    for mode in ("shortest", "pad"):
        it = _pipeline(packed=True).to_torch(uneven=mode)  # a pipeline's first pass, each
        loader = iter(it)  # as a DataLoader with num_workers=0 does
        batches = ((b, it.get_state()["epoch"]) for b in loader)

        def tokens(b, mode=mode):
            ids = b["tokens"].flatten()
            weight = (ids > 0).to(torch.int64)
            if mode == "pad":
                weight *= b["mask"].to(torch.int64)[:, None].expand_as(b["tokens"]).flatten()
            return (ids - 1).clamp(min=0), weight

        result[mode] = _stats(_count(batches, tokens), loader.stats())
    return result


def _killed(spec: dict) -> dict:
    """Steps of a filtered pipeline, slowly; the victim kills itself mid-epoch."""
    import torch.distributed as dist

    from tpufeed.run.hosts.agreement import TorchAgreement

    agreement = TorchAgreement(lost_after_s=LOST_AFTER_S, timeout_s=60)
    it = _pipeline().iterator(uneven="shortest", agreement=agreement)
    for step, _ in enumerate(it):
        if dist.get_rank() == spec["kill"] and step == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
    return {"type": None, "error": "the run ended without an error", "hosts": []}


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    _worker(int(a[0]), int(a[1]), int(a[2]), Path(a[3]), json.loads(a[4]))
