"""`tpufeed quickstart`: build a small real dataset on local disk, then train on it with JAX.

The data is scikit-learn's bundled handwritten digits (1,797 8x8 images, 10 classes): 1,536
training records (24 batches of 64, so every device count up to 64 that is a power of two
splits them evenly) written as ArrayRecord shards of tpufeed-encoded records, and 261 held out.
A small MLP is trained with a jitted step on global batches that `to_jax` splits over the
local devices, two batches ahead of the loop. On the devices, a jitted scatter-add counts every
record id of each epoch, proving exactly-once delivery; the run also resumes an iterator from
a mid-epoch state and reports throughput, the input-wait fraction and held-out accuracy.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tpufeed import codec
from tpufeed.cli.arguments import Subcommands, positive_int
from tpufeed.cli.json_output import QUICKSTART, add_json_option
from tpufeed.dataset import Dataset
from tpufeed.errors import InvalidArgumentError, MissingDependencyError

NUM_SHARDS = 4
TEST_RECORDS = 261
BATCH = 64


def build(root: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """Writes the training split as ArrayRecord shards; returns the paths and the test split."""
    from tpufeed.sources.array_record.source import write_array_records

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise MissingDependencyError(
            "the quickstart uses scikit-learn's bundled digits; `pip install tpufeed[quickstart]`"
        ) from None
    digits = load_digits()
    images = (digits.images * (255 / 16)).astype(np.uint8)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    test, train = order[:TEST_RECORDS], order[TEST_RECORDS:]
    writable_folder(root)
    paths = []
    for shard, part in enumerate(np.array_split(train, NUM_SHARDS)):
        path = root / f"digits-train-{shard:05d}-of-{NUM_SHARDS:05d}.array_record"
        fresh = path.with_name(path.name + ".new")
        write_array_records(
            str(fresh),
            (codec.encode({"image": images[i], "label": labels[i], "id": int(i)}) for i in part),
        )
        _keep_or_replace(fresh, path)
        paths.append(str(path))
    return paths, {"image": images[test], "label": labels[test]}


def writable_folder(root: Path) -> None:
    """Makes `root` and writes a probe in it, before any work: a file, a folder that cannot
    be made (/proc) or a read-only disk is an InvalidArgumentError naming it (one line and
    exit 2 from the command, not a traceback and exit 1, which says exactly-once failed)."""
    if root.exists() and not root.is_dir():
        raise InvalidArgumentError(
            f"--output {root} is a file; the quickstart writes its shards into a folder: "
            "name a new one, or one it wrote before"
        )
    step = "made"
    try:
        root.mkdir(parents=True, exist_ok=True)
        step = "written"
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as e:
        where = f" ({e.filename})" if e.filename and str(e.filename) != str(root) else ""
        raise InvalidArgumentError(
            f"--output {root} cannot be {step}: {e.strerror or e}{where}; name a folder on "
            "a writable disk"
        ) from e


def _keep_or_replace(fresh: Path, path: Path) -> None:
    """Moves `fresh` to `path`, unless `path` already holds the same bytes: a shard rewritten
    with its old records is still another file to a saved state (docs/faults.md), so a rerun
    keeps the files a run before it wrote, and its checkpoints resume."""
    if path.is_file() and filecmp.cmp(fresh, path, shallow=False):
        fresh.unlink()
    else:
        os.replace(fresh, path)


def augment(element: dict, rng: np.random.Generator) -> dict:
    """Shift the digit by up to one pixel; the shift depends only on (seed, epoch, record)."""
    dy, dx = rng.integers(-1, 2, size=2)
    image = np.roll(element["image"], (int(dy), int(dx)), axis=(0, 1))
    return {
        "image": features(image[None])[0],
        "label": element["label"].astype(np.int32),
        "id": np.int32(element["id"]),
    }


def features(images: np.ndarray) -> np.ndarray:
    return images.reshape(len(images), -1).astype(np.float32) / 255.0


def make_dataset(paths: list[str], epochs: int) -> Dataset:
    return (
        Dataset.from_array_record(paths)
        .shuffle(seed=0)
        .shard()
        .map(codec.decode)
        .random_map(augment)
        .batch(BATCH, drop_remainder=True)
        .repeat(epochs)
        .prefetch(2)
    )


class Model:
    """A 64-64-10 MLP trained by plain SGD, and a per-epoch record counter, all jitted."""

    def __init__(self, jax: Any, sharding: Any):
        jnp = jax.numpy
        from jax.sharding import NamedSharding, PartitionSpec

        self.jax, self.replicated = jax, NamedSharding(sharding.mesh, PartitionSpec())
        k1, k2 = jax.random.split(jax.random.key(0))
        self.params = jax.device_put(
            {
                "w1": jax.random.normal(k1, (64, 64)) * 0.25,
                "b1": jnp.zeros(64),
                "w2": jax.random.normal(k2, (64, 10)) * 0.25,
                "b2": jnp.zeros(10),
            },
            self.replicated,
        )

        def logits(params: dict, x: Any) -> Any:
            return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]

        def loss(params: dict, batch: dict) -> Any:
            logp = jax.nn.log_softmax(logits(params, batch["image"]))
            return -jnp.mean(jnp.take_along_axis(logp, batch["label"][:, None], axis=1))

        def step(params: dict, batch: dict) -> tuple[dict, Any]:
            value, grads = jax.value_and_grad(loss)(params, batch)
            return jax.tree.map(lambda p, g: p - 1.0 * g, params, grads), value

        self.step = jax.jit(step)
        self.logits = jax.jit(logits)
        self.count = jax.jit(
            lambda counts, ids: counts.at[ids].add(1), out_shardings=self.replicated
        )

    def zeros(self, n: int) -> Any:
        return self.jax.device_put(self.jax.numpy.zeros(n, self.jax.numpy.int32), self.replicated)


def run(root: str = "tpufeed-quickstart", epochs: int = 20) -> dict:
    """Builds the digits shards under `root`, trains on them for `epochs` and returns what
    `tpufeed quickstart` prints: exactly once, resume, throughput, input wait, accuracy."""
    try:
        import jax
    except ImportError:
        raise MissingDependencyError(
            "the quickstart trains with JAX; `pip install tpufeed[quickstart]`"
        ) from None

    started = time.perf_counter()
    paths, test = build(Path(root))
    ds = make_dataset(paths, epochs)
    n = len(ds.source)
    it = ds.to_jax(prefetch=2)
    model = Model(jax, it.sharding)
    seen, checkpoint, after_checkpoint = _train(jax, model, it, epochs, n)
    # n deliveries of n distinct training records, none twice: each exactly once.
    exactly_once = len(seen) == epochs and all(c.sum() == n and c.max() == 1 for c in seen.values())
    resumed = _first_ids_after(ds, checkpoint) if checkpoint is not None else []
    logits = model.logits(model.params, jax.numpy.asarray(features(test["image"])))
    accuracy = float(np.mean(np.asarray(logits).argmax(axis=1) == test["label"]))
    return {
        "dataset": os.path.abspath(root),
        "shards": len(paths),
        "train_records": n,
        "devices": jax.device_count(),
        "epochs": len(seen),
        "records_per_s": it.window_batches * BATCH * jax.process_count() / it.wall_seconds
        if it.wall_seconds > 0
        else 0.0,
        "input_wait_fraction": it.wait_fraction,
        "exactly_once_every_epoch": exactly_once,
        "resume_matches": bool(after_checkpoint) and resumed == after_checkpoint,
        "test_accuracy": accuracy,
        "seconds": time.perf_counter() - started,
    }


def _train(
    jax: Any, model: Model, it: Any, epochs: int, n: int
) -> tuple[dict[int, np.ndarray], dict | None, list[int]]:
    """The training loop, one step in flight, counting each epoch's record ids on the devices.
    Returns those counts, the state taken mid-way through epoch 1 (epoch 0 when it is the only
    one), and the ids of the batch that came right after it."""
    from tqdm import tqdm

    ids = n + TEST_RECORDS  # record ids index the whole digits set
    counts: dict[int, Any] = {}
    steps_per_epoch = n // BATCH
    # Mid-way through epoch 1, where the state also names an epoch past the first; mid-way
    # through epoch 0 when there is one epoch (else no state was taken and resume "failed").
    checkpoint_step = steps_per_epoch * min(1, epochs - 1) + steps_per_epoch // 3
    checkpoint: dict | None = None
    after_checkpoint: list[int] = []
    loss, previous = None, None
    with tqdm(
        total=epochs * steps_per_epoch,
        desc=f"training on {jax.device_count()} device(s)",
        unit="batch",
    ) as bar:
        for step, batch in enumerate(it, start=1):
            epoch = it.get_state()["epoch"]
            model.params, loss = model.step(model.params, batch)
            counts[epoch] = model.count(counts.get(epoch, model.zeros(ids)), batch["id"])
            if previous is not None:
                previous.block_until_ready()  # one step in flight: the loop keeps pace with the device
            previous = loss
            if step == checkpoint_step + 1 and checkpoint is not None:
                after_checkpoint = np.asarray(batch["id"]).tolist()
            if step == checkpoint_step:
                checkpoint = it.get_state()
            bar.update(1)
            if step % steps_per_epoch == 0:
                bar.set_postfix(loss=f"{float(loss):.3f}")
    jax.block_until_ready(model.params)
    seen = {e: np.asarray(c.addressable_data(0)) for e, c in counts.items()}
    return seen, checkpoint, after_checkpoint


def _first_ids_after(ds: Dataset, state: dict) -> list[int]:
    """The record ids of the first batch of an iterator resumed from `state`."""
    again = ds.to_jax(prefetch=0)
    again.set_state(state)
    ids: list[int] = np.asarray(next(again)["id"]).tolist()
    again.close()
    return ids


_NEXT = (
    "your own data: docs/quickstart.md (Your first pipeline); your own pipeline measured "
    "and its bottleneck named: `tpufeed bench my_pipeline.py` (docs/tuning.md)"
)
_EPILOG = """\
examples:
  tpufeed quickstart --epochs 2
  tpufeed quickstart --output /tmp/qs --json | jq .records_per_s

next:
  your own data: docs/quickstart.md (Your first pipeline)
  your own pipeline measured, its bottleneck named: tpufeed bench my_pipeline.py"""


def add_parser(sub: Subcommands) -> None:
    """`tpufeed quickstart [--output DIR] [--epochs N]`."""
    quick = sub.add_parser(
        "quickstart",
        help="build a small real dataset locally and train from it",
        description="Writes scikit-learn's digits as ArrayRecord shards into --output, trains "
        "a small JAX model from them through a shuffled, augmented, batched pipeline, and "
        "checks that every record arrives exactly once per epoch and that an iterator "
        "resumed from a mid-epoch state continues exactly (exit 1 if either check fails). "
        "Needs `pip install tpufeed[quickstart]`.",
        epilog=_EPILOG,
    )
    quick.add_argument("--output", default="tpufeed-quickstart", help="folder for its shards")
    quick.add_argument("--epochs", type=positive_int, default=20, help="training epochs")
    add_json_option(quick, QUICKSTART)
    quick.set_defaults(run=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Runs the quickstart and prints its findings; exit 1 if exactly-once or resume failed."""
    result = run(args.output, epochs=args.epochs)
    if args.json:
        QUICKSTART.emit(result)
    else:
        print_result(result)
    ok = result["exactly_once_every_epoch"] and result["resume_matches"]
    return 0 if ok else 1


def print_result(result: dict[str, Any]) -> None:
    """What `run` found, one line each; the input wait says what it means."""
    print(
        f"dataset        {result['dataset']} ({result['shards']} ArrayRecord shards, "
        f"{result['train_records']} training records: scikit-learn digits)"
    )
    print(
        f"epochs         {result['epochs']}, every record exactly once per epoch: "
        f"{result['exactly_once_every_epoch']}"
    )
    print(
        f"resume         iterator rebuilt from a mid-epoch state continues exactly: "
        f"{result['resume_matches']}"
    )
    print(
        f"throughput     {result['records_per_s']:,.0f} records/s (pipeline + jitted JAX train "
        f"step on {result['devices']} device(s))"
    )
    print(f"input wait     {result['input_wait_fraction']:.1%} of the loop's time")
    print(
        "               (the share of the training loop's time spent waiting for the next "
        "batch; high = input-bound: the pipeline, not the model, sets the pace)"
    )
    print(f"test accuracy  {result['test_accuracy']:.3f}")
    print(f"total          {result['seconds']:.1f} s")
    print(f"next           {_NEXT}")
