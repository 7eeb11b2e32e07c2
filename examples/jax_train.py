"""Train a small classifier with JAX from a tpufeed pipeline, checkpointing the input position.

The data is scikit-learn's bundled handwritten digits, written once as ArrayRecord shards
(`tpufeed quickstart` writes the same files). Batches arrive as global `jax.Array`s split over
all devices, two batches ahead of the loop; in a multi-process run (`jax.distributed.initialize()`
before this code) each process feeds its own share into the same global arrays.
Orbax's CheckpointManager saves the parameters and the input position side by side
(`tpufeed.checkpoint`), so a resumed run continues with exactly the batches the interrupted one
would have seen next, on this process count or another.

    python examples/jax_train.py --steps 200 --checkpoint-at 100 --checkpoint /tmp/ckpt
    python examples/jax_train.py --steps 200 --resume /tmp/ckpt
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/jax_train.py  # 8 devices
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec

import tpufeed
from tpufeed.adapters.jax import JaxIterator
from tpufeed.cli.quickstart import build


def augment(element: dict, rng: np.random.Generator) -> dict:
    """Shift the digit by up to one pixel; the shift depends only on (seed, epoch, record)."""
    dy, dx = rng.integers(-1, 2, size=2)
    image = np.roll(element["image"], (int(dy), int(dx)), axis=(0, 1))
    return {
        "image": image.astype(np.float32).reshape(64) / 255.0,
        "label": element["label"].astype(np.int32),
    }


def init_params(key: jax.Array, hidden: int = 64) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (64, hidden)) * 0.25,
        "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, 10)) * 0.25,
        "b2": jnp.zeros(10),
    }


def logits_of(params: dict, images: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(images @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def loss_of(params: dict, batch: dict) -> jax.Array:
    logp = jax.nn.log_softmax(logits_of(params, batch["image"]))
    return -jnp.mean(jnp.take_along_axis(logp, batch["label"][:, None], axis=1))


@jax.jit
def train_step(params: dict, batch: dict, lr: float = 1.0) -> tuple[dict, jax.Array]:
    loss, grads = jax.value_and_grad(loss_of)(params, batch)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def host(value: jax.Array) -> np.ndarray:
    """A replicated array's value (also when other processes hold copies of it)."""
    return np.asarray(value.addressable_data(0))


def restore(path: Path, params: dict, it: JaxIterator) -> tuple[dict, int]:
    """Loads the latest checkpoint in `path`: the parameters, and the input position into `it`."""
    with ocp.CheckpointManager(path.absolute()) as manager:
        step = manager.latest_step()
        restored = manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(params),
                data=tpufeed.checkpoint.CheckpointRestore(it),
            ),
        )
    return restored.params, step


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="tpufeed-quickstart", help="folder for the digits shards")
    p.add_argument("--steps", type=int, default=460, help="train until this global step")
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--prefetch", type=int, default=2, help="batches transferred ahead")
    p.add_argument(
        "--checkpoint", type=Path, default=None, help="CheckpointManager folder to write"
    )
    p.add_argument("--checkpoint-at", type=int, default=0, help="step at which to write it")
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="CheckpointManager folder to resume from (its latest step)",
    )
    args = p.parse_args(argv)

    paths, test = build(Path(args.data))
    ds = (
        tpufeed.Dataset.from_array_record(paths)
        .shuffle(seed=0)
        .shard()
        .map(tpufeed.codec.decode)
        .random_map(augment)
        .batch(args.batch_size, drop_remainder=True)
        .repeat()
    )
    it = ds.to_jax(prefetch=args.prefetch)
    replicated = NamedSharding(it.sharding.mesh, PartitionSpec())
    params, step = jax.device_put(init_params(jax.random.key(0)), replicated), 0
    if args.resume is not None:
        params, step = restore(args.resume, params, it)
    manager = ocp.CheckpointManager(args.checkpoint.absolute()) if args.checkpoint else None

    started = time.perf_counter()
    while step < args.steps:
        params, loss = train_step(params, next(it))
        step += 1
        if step % 50 == 0 or step == args.steps:
            print(
                f"step {step:5d}  loss {float(host(loss)):.4f}  epoch {it.get_state()['epoch']}",
                flush=True,
            )
        if manager is not None and step == args.checkpoint_at:  # every process saves its part
            manager.save(
                step,
                args=ocp.args.Composite(
                    params=ocp.args.StandardSave(params), data=tpufeed.checkpoint.CheckpointSave(it)
                ),
            )
            print(f"checkpoint at step {step} -> {args.checkpoint}", flush=True)
    it.close()
    if manager is not None:
        manager.close()  # waits for the checkpoint to be written
    elapsed = time.perf_counter() - started
    images = jnp.asarray(test["image"].reshape(len(test["image"]), 64).astype(np.float32) / 255.0)
    predicted = host(jnp.argmax(logits_of(params, images), axis=1))
    accuracy = float(np.mean(predicted == test["label"]))
    checksum = float(sum(np.abs(host(v)).sum() for v in params.values()))
    result = {
        "step": step,
        "devices": jax.device_count(),
        "accuracy": accuracy,
        "input_wait_fraction": it.wait_fraction,
        "seconds": elapsed,
        "params_checksum": checksum,
    }
    print(
        f"devices {result['devices']}  steps {step}  test accuracy {accuracy:.3f}  "
        f"input wait {it.wait_fraction:.1%}  params checksum {checksum:.6f}",
        flush=True,
    )
    return result


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
