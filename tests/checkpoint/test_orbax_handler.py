"""tpufeed.checkpoint with the real orbax-checkpoint package.

In one process: `ocp.CheckpointManager` saves a model pytree and the iterator's state side by
side (`ocp.args.Composite`), for `iter(ds)` and `to_jax`, and the batches after a restore are
those of an uninterrupted run. The file layout and its errors: test_state_files.py, without
Orbax.

With real JAX processes on localhost: 2 processes train, save, and are killed with SIGKILL;
2 fresh ones restore and continue exactly as an uninterrupted run, and 1 process restores the
2-process checkpoint of a filtered pipeline with the rest of the epoch exactly once.

This file is also the worker of those runs:
`python tests/checkpoint/test_orbax_handler.py worker ...`.
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

import numpy as np
import pytest

import tpufeed

N, BATCH, EPOCHS, SEED, SAVE_AT = 160, 8, 2, 3, 3
TIMEOUT_S = 90


def kept(i: int) -> bool:
    return (i * 7) % 10 < 6


def pipeline(shard: bool = False) -> tpufeed.Dataset:
    """A filtered pipeline: how many records each host keeps depends on the data."""
    ds = tpufeed.Dataset.from_sequence(list(range(N))).shuffle(SEED)
    ds = ds.shard() if shard else ds
    return (
        ds.map(lambda r: {"id": np.int32(r)})
        .filter(lambda e: kept(int(e["id"])))
        .batch(BATCH)
        .repeat(EPOCHS)
    )


def ids_of(batches: list) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batches]


# -- one process: CheckpointManager with a model and the data side by side ---------------------


def _manager(path: Path):
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(path)


def _save(path: Path, step: int, model: dict, it) -> None:
    import orbax.checkpoint as ocp

    with _manager(path) as mgr:
        mgr.save(
            step,
            args=ocp.args.Composite(
                model=ocp.args.StandardSave(model), data=tpufeed.checkpoint.CheckpointSave(it)
            ),
        )


def _restore(path: Path, model: dict, it):
    import orbax.checkpoint as ocp

    with _manager(path) as mgr:
        return mgr.restore(
            mgr.latest_step(),
            args=ocp.args.Composite(
                model=ocp.args.StandardRestore(model), data=tpufeed.checkpoint.CheckpointRestore(it)
            ),
        )


ITERATORS = {"iter": lambda ds: iter(ds), "to_jax": lambda ds: ds.to_jax(prefetch=2, uneven="pad")}


@pytest.mark.parametrize("kind", sorted(ITERATORS))
def test_manager_saves_model_and_data_and_a_new_iterator_continues_exactly(tmp_path, kind):
    import jax.numpy as jnp

    straight = ids_of(list(ITERATORS[kind](pipeline())))
    it = ITERATORS[kind](pipeline())
    before = ids_of([next(it) for _ in range(SAVE_AT)])
    _save(tmp_path, SAVE_AT, {"w": jnp.arange(3.0)}, it)
    assert (
        json.loads((tmp_path / str(SAVE_AT) / "data" / "process_0-of-1.json").read_text())
        == it.get_state()
    )
    it.close()

    fresh = ITERATORS[kind](pipeline())
    restored = _restore(tmp_path, {"w": jnp.zeros(3)}, fresh)
    assert restored.data is fresh
    assert np.asarray(restored.model["w"]).tolist() == [0.0, 1.0, 2.0]
    assert before + ids_of(list(fresh)) == straight


def test_restore_moves_a_live_iterator_back_to_the_saved_step(tmp_path):
    import jax.numpy as jnp

    it = pipeline().to_jax(prefetch=2, uneven="pad")
    [next(it) for _ in range(SAVE_AT)]
    _save(tmp_path, SAVE_AT, {"w": jnp.ones(2)}, it)
    rest = ids_of(list(it))  # ran to the end: prefetch threads done, the iterator finished
    _restore(tmp_path, {"w": jnp.zeros(2)}, it)
    assert ids_of(list(it)) == rest


def test_restore_starts_the_first_batch_before_the_first_next(tmp_path):
    """CheckpointRestore calls `it.start()` after `set_state`, as Grain's handler calls
    `start_prefetch()`: the first batch is made while the rest restores, and it is exact."""
    import jax.numpy as jnp

    made = tmp_path / "made"
    made.mkdir()

    def mark(e):
        (made / str(int(e["id"][0]))).touch()  # a batch: its first record
        return e

    it = iter(pipeline().map(mark))
    [next(it) for _ in range(SAVE_AT)]
    _save(tmp_path / "ckpt", SAVE_AT, {"w": jnp.ones(2)}, it)
    rest = ids_of(list(it))  # the run has ended: its marks are all there
    for path in made.iterdir():
        path.unlink()
    fresh = iter(pipeline().map(mark))
    _restore(tmp_path / "ckpt", {"w": jnp.zeros(2)}, fresh)
    deadline = time.monotonic() + TIMEOUT_S
    while not any(made.iterdir()):  # no next() yet: only start() can have made these
        assert time.monotonic() < deadline, "the restore began no batch"
        time.sleep(0.01)
    assert ids_of(list(fresh)) == rest


def test_restore_into_another_pipeline_names_the_directory_and_the_cause(tmp_path):
    import jax.numpy as jnp

    it = iter(pipeline())
    next(it)
    _save(tmp_path, 1, {"w": jnp.ones(2)}, it)
    other = iter(tpufeed.Dataset.from_sequence(list(range(N))).batch(4))
    with pytest.raises(tpufeed.StateError) as e:
        _restore(tmp_path, {"w": jnp.zeros(2)}, other)
    assert str(tmp_path / "1" / "data") in str(e.value)
    assert "another dataset or pipeline" in str(e.value)


def test_any_object_with_get_state_and_set_state_round_trips(tmp_path):
    import orbax.checkpoint as ocp

    class Counter:
        def __init__(self, n: int) -> None:
            self.n = n

        def get_state(self) -> dict:
            return {"n": self.n}

        def set_state(self, state: dict) -> None:
            self.n = state["n"]

    with _manager(tmp_path) as mgr:
        mgr.save(1, args=ocp.args.Composite(data=tpufeed.checkpoint.CheckpointSave(Counter(7))))
    with _manager(tmp_path) as mgr:
        back = mgr.restore(
            1, args=ocp.args.Composite(data=tpufeed.checkpoint.CheckpointRestore(Counter(0)))
        )
    assert back.data.n == 7


def test_restore_from_an_item_saved_by_another_handler_names_the_directory(tmp_path):
    import orbax.checkpoint as ocp

    with _manager(tmp_path) as mgr:
        mgr.save(1, args=ocp.args.Composite(data=ocp.args.JsonSave({"not": "a state"})))
    with _manager(tmp_path) as mgr, pytest.raises(tpufeed.StateError) as e:
        mgr.restore(
            1, args=ocp.args.Composite(data=tpufeed.checkpoint.CheckpointRestore(iter(pipeline())))
        )
    assert str(tmp_path / "1" / "data") in str(e.value) and "CheckpointSave" in str(e.value)


@pytest.mark.parametrize(
    "arg, method", [("CheckpointSave", "get_state"), ("CheckpointRestore", "set_state")]
)
def test_args_refuse_an_object_that_is_not_an_iterator(arg, method):
    with pytest.raises(tpufeed.InvalidArgumentError, match=f"{method}.*got list"):
        getattr(tpufeed.checkpoint, arg)([1, 2])


def test_importing_tpufeed_imports_no_orbax_and_a_missing_orbax_names_the_extra():
    code = (
        "import sys; import tpufeed, tpufeed.checkpoint; "
        "print(sorted({'jax', 'orbax'} & set(sys.modules))); sys.modules['orbax'] = None\n"
        "try: tpufeed.checkpoint.CheckpointSave\n"
        "except tpufeed.TpufeedError as e: print(type(e).__name__, e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert lines[0] == "[]", out.stderr
    assert lines[1].startswith("MissingDependencyError") and "tpufeed[orbax]" in lines[1], out


# -- real JAX processes: save, SIGKILL, restore ------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(processes: int, out: Path, spec: dict) -> list[subprocess.Popen]:
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    port = _free_port()
    return [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "worker",
                str(pid),
                str(processes),
                str(port),
                str(out),
                json.dumps(spec),
            ],
            env=env,
            stdout=open(out / f"log-{pid}.txt", "w"),
            stderr=subprocess.STDOUT,
        )
        for pid in range(processes)
    ]


def _wait_for(children: list[subprocess.Popen], out: Path, name: str) -> list[dict]:
    """Waits until every process has written `<name>-<pid>.json`, then reads them; names the
    process and shows its log if one fails or time runs out."""
    paths = [out / f"{name}-{pid}.json" for pid in range(len(children))]
    deadline = time.monotonic() + TIMEOUT_S
    while not all(p.exists() for p in paths):
        failed = [i for i, c in enumerate(children) if c.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            for c in children:
                c.kill()
            logs = "\n".join(
                f"--- process {i} ---\n{(out / f'log-{i}.txt').read_text()[-3000:]}"
                for i in range(len(children))
            )
            why = f"process {failed[0]} failed" if failed else "timed out"
            raise AssertionError(f"no {name} from every process ({why}):\n{logs}")
        time.sleep(0.1)
    return [json.loads(p.read_text()) for p in paths]


def _run(processes: int, out: Path, spec: dict) -> list[dict]:
    children = _start(processes, out, spec)
    try:
        return _wait_for(children, out, "result")
    finally:
        for c in children:
            c.wait(timeout=30)


@pytest.fixture(scope="module")
def killed_after_saving(tmp_path_factory) -> dict:
    """2 processes train SAVE_AT steps, save with CheckpointManager, train on, and are killed."""
    out = tmp_path_factory.mktemp("killed")
    children = _start(2, out, {"run": "train_then_hang", "checkpoint": str(out / "ckpt")})
    try:
        saved = _wait_for(children, out, "saved")
    finally:
        for c in children:
            c.send_signal(signal.SIGKILL)
        codes = [c.wait(timeout=30) for c in children]
    assert codes == [-signal.SIGKILL] * 2
    return {"ckpt": out / "ckpt", "saved": saved}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_killed_processes_restore_on_two_exactly_as_an_uninterrupted_run(
    killed_after_saving, tmp_path
):
    results = _run(2, tmp_path, {"run": "restore", "checkpoint": str(killed_after_saving["ckpt"])})
    for pid, (saved, result) in enumerate(zip(killed_after_saving["saved"], results)):
        straight = result["straight"]
        assert saved["batches"] == straight["batches"][:SAVE_AT], f"process {pid}"
        assert result["restored"]["batches"] == straight["batches"][SAVE_AT:], f"process {pid}"
        assert result["restored"]["w"] == straight["w"]  # the model saw the same data


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_two_process_checkpoint_of_a_filtered_pipeline_restores_on_one_exactly_once(
    killed_after_saving, tmp_path
):
    saved = killed_after_saving["saved"]
    (result,) = _run(
        1,
        tmp_path,
        {"run": "restore", "checkpoint": str(killed_after_saving["ckpt"]), "straight": False},
    )
    assert [s["epoch"] for s in saved] == [0, 0]
    before = [i for s in saved for b in s["batches"] for i in b]
    after = result["restored"]["by_epoch"]
    every_kept = [i for i in range(N) if kept(i)]
    assert sorted(before + after["0"]) == every_kept
    assert sorted(after["1"]) == every_kept


# -- the worker ---------------------------------------------------------------------------------


def _worker(pid: int, processes: int, port: int, out: Path, spec: dict) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=processes,
        process_id=pid,
        initialization_timeout=60,
    )
    if spec["run"] == "train_then_hang":
        _train_then_hang(pid, out, spec)
    else:
        result = _restore_and_train(spec)
        (out / f"result-{pid}.json").write_text(json.dumps(result))
        jax.distributed.shutdown()


class _Trainer:
    """A trivial training step on global batches: `w` sums the kept ids (a collective), and
    each step's local kept ids are recorded."""

    def __init__(self, it) -> None:
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec

        self.it = it
        replicated = NamedSharding(it.sharding.mesh, PartitionSpec())
        self.w = jax.device_put(jnp.zeros((), jnp.int32), replicated)
        self._step = jax.jit(
            lambda w, b: w + jnp.sum(b["id"] * b["mask"]), out_shardings=replicated
        )
        self.batches: list[list[int]] = []
        self.by_epoch: dict[str, list[int]] = {}

    def step(self) -> bool:
        batch = next(self.it, None)
        if batch is None:
            return False
        self.w = self._step(self.w, batch)
        ids, mask = (
            np.concatenate(
                [
                    np.asarray(s.data)
                    for s in sorted(
                        batch[k].addressable_shards, key=lambda s: s.index[0].start or 0
                    )
                ]
            )
            for k in ("id", "mask")
        )
        self.batches.append(ids[mask].tolist())
        self.by_epoch.setdefault(str(self.it.get_state()["epoch"]), []).extend(ids[mask].tolist())
        return True

    def result(self) -> dict:
        return {
            "batches": self.batches,
            "by_epoch": self.by_epoch,
            "w": int(np.asarray(self.w.addressable_data(0))),
        }


def _train_then_hang(pid: int, out: Path, spec: dict) -> None:
    import orbax.checkpoint as ocp

    trainer = _Trainer(pipeline(shard=True).to_jax(prefetch=2, uneven="pad"))
    for _ in range(SAVE_AT):
        trainer.step()
    mgr = ocp.CheckpointManager(spec["checkpoint"])
    mgr.save(
        SAVE_AT,
        args=ocp.args.Composite(
            model=ocp.args.StandardSave({"w": trainer.w}),
            data=tpufeed.checkpoint.CheckpointSave(trainer.it),
        ),
    )
    mgr.wait_until_finished()
    epoch = trainer.it.get_state()["epoch"]
    (out / f"saved-{pid}.json").write_text(json.dumps({**trainer.result(), "epoch": epoch}))
    while trainer.step():  # training goes on until the SIGKILL
        time.sleep(0.05)
    time.sleep(TIMEOUT_S)


def _restore_and_train(spec: dict) -> dict:
    import orbax.checkpoint as ocp

    result = {}
    if spec.get("straight", True):
        straight = _Trainer(pipeline(shard=True).to_jax(prefetch=2, uneven="pad"))
        while straight.step():
            pass
        result["straight"] = straight.result()
    restored = _Trainer(pipeline(shard=True).to_jax(prefetch=2, uneven="pad"))
    with ocp.CheckpointManager(spec["checkpoint"]) as mgr:
        back = mgr.restore(
            mgr.latest_step(),
            args=ocp.args.Composite(
                model=ocp.args.StandardRestore({"w": restored.w}),
                data=tpufeed.checkpoint.CheckpointRestore(restored.it),
            ),
        )
    restored.w = back.model["w"]
    while restored.step():
        pass
    result["restored"] = restored.result()
    return result


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    _worker(int(a[0]), int(a[1]), int(a[2]), Path(a[3]), json.loads(a[4]))
