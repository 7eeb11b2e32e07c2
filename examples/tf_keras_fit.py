"""Fit a Keras model on a tpufeed pipeline through `Dataset.to_tf()`.

The pipeline runs its epochs itself (`.repeat(epochs)`: a new shuffle each) in one pass, so
`fit` gets `steps_per_epoch` and mid-epoch backups resume exactly; the tf.data.Dataset's
`element_spec` is the pipeline's (`Dataset.element_spec`). Without backups mid-epoch a plain
`fit(ds.to_tf(), epochs=...)` also gives each Keras epoch a new shuffle.

With `--backup-dir`, tpufeed's `BackupAndRestore` backs up model, optimizer and the data
position every `--save-freq` steps; run the same command again after an interruption and
`fit` goes on with exactly the batches it would have trained on (`--kill-at-step` simulates
a preemption).

    python examples/tf_keras_fit.py --epochs 10 --backup-dir /tmp/keras-backup
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import tpufeed
from tpufeed.adapters.keras import BackupAndRestore
from tpufeed.cli.quickstart import build


def augment(element: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(image, label) for Keras; the one-pixel shift depends only on (seed, epoch, record)."""
    dy, dx = rng.integers(-1, 2, size=2)
    image = np.roll(element["image"], (int(dy), int(dx)), axis=(0, 1))
    return image.astype(np.float32).reshape(64) / 255.0, element["label"].astype(np.int32)


class KillAt(tf.keras.callbacks.Callback):
    """Simulates a preemption: SIGKILL once the optimizer has taken `step` steps."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="tpufeed-quickstart", help="folder for the digits shards")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--backup-dir", help="back up here; run again to resume after an interruption")
    p.add_argument("--save-freq", type=int, default=10, help="steps between backups")
    p.add_argument(
        "--kill-at-step", type=int, default=0, help="SIGKILL this process after this step"
    )
    args = p.parse_args(argv)

    paths, test = build(Path(args.data))
    ds = (
        tpufeed.Dataset.from_array_record(paths)
        .shuffle(seed=0)
        .map(tpufeed.codec.decode)
        .random_map(augment)
        .batch(args.batch_size, drop_remainder=True)
        .repeat(args.epochs)
        .prefetch(2)
    )
    steps_per_epoch = len(ds.source) // args.batch_size
    train = ds.to_tf()  # prefetching happens in tpufeed, so train.tpufeed sees the loop's wait
    print(f"element_spec {train.element_spec}")

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(0.01),
        metrics=["accuracy"],
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    callbacks: list = []
    if args.backup_dir:
        callbacks.append(BackupAndRestore(train, args.backup_dir, save_freq=args.save_freq))
    if args.kill_at_step:
        callbacks.append(KillAt(args.kill_at_step))
    model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=steps_per_epoch,
        shuffle=False,
        verbose=2,
        callbacks=callbacks,
    )
    images = test["image"].reshape(len(test["image"]), 64).astype(np.float32) / 255.0
    _, accuracy = model.evaluate(images, test["label"], verbose=0)
    weights = sum(float(np.abs(w).sum()) for w in model.get_weights())
    print(
        f"epochs {args.epochs}  steps/epoch {steps_per_epoch}  test accuracy {accuracy:.3f}  "
        f"input wait {train.tpufeed.wait_fraction:.1%} of step time  weights {weights:.6g}"
    )
    return {"accuracy": float(accuracy), "weights": weights}


if __name__ == "__main__":
    main()
