"""Keras `fit` killed with SIGKILL and restarted with tpufeed's BackupAndRestore trains on the
same batches as a `fit` never interrupted: with and without steps_per_epoch, backups at epoch
ends and mid-epoch. Real Keras and TensorFlow in fresh processes; this file is also the
training script they run (`python tests/adapters/test_keras.py --log ...`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

RECORDS, BATCH = 48, 4  # 12 batches per pipeline epoch


def pipeline(epochs: int):
    """(features with each record's id, label) batches; `epochs` shuffled passes over 48 records."""
    import tpufeed

    def element(i: int):
        x = np.array([np.sin(i), np.cos(i), i % 3, 1.0], np.float32)
        return {"x": x, "id": np.int64(i)}, np.int32(i % 2)

    return (
        tpufeed.Dataset.from_sequence(list(range(RECORDS)))
        .shuffle(seed=7)
        .map(element)
        .batch(BATCH, drop_remainder=True)
        .repeat(epochs)
        .prefetch(2)
    )


def train(argv: list[str]) -> None:
    """Fits a small model, writing the ids of every trained batch to --log as it goes."""
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True)
    p.add_argument("--backup", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: fit without it")
    p.add_argument("--save-freq", default="epoch")
    p.add_argument("--kill-at", type=int, default=0, help="SIGKILL self after this many steps")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    from tpufeed.adapters.keras import BackupAndRestore

    log = open(args.log, "a")

    def seen(ids):
        log.write(json.dumps(ids.numpy().tolist()) + "\n")
        log.flush()
        return ids

    class Spy(keras.layers.Layer):
        """Logs the ids of each batch the model trains on (inside the compiled step)."""

        def call(self, inputs, training=None):
            if training:
                ids = tf.py_function(seen, [inputs["id"]], tf.int64)
                return inputs["x"] + 0.0 * tf.cast(tf.reduce_sum(ids), tf.float32)
            return inputs["x"]

    class Kill(keras.callbacks.Callback):
        """SIGKILL after the --kill-at-th trained step."""

        steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    keras.utils.set_random_seed(0)
    inputs = {"x": keras.Input((4,), name="x"), "id": keras.Input((), dtype="int64", name="id")}
    outputs = keras.layers.Dense(2)(Spy()(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    epochs_of_data = args.epochs if args.steps_per_epoch else 1
    train_ds = pipeline(epochs_of_data).to_tf()
    save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
    backup = BackupAndRestore(train_ds, args.backup, save_freq=save_freq)
    model.fit(
        train_ds,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch or None,
        callbacks=[backup, Kill()],
        verbose=0,
    )
    weights = float(sum(np.abs(w).sum() for w in model.get_weights()))
    log.write(json.dumps({"weights": weights}) + "\n")


def run(tmp: Path, name: str, *args: str, killed: bool = False) -> tuple[list, dict]:
    log = tmp / f"{name}.jsonl"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, __file__, "--log", str(log), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if killed:
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    batches = [line for line in lines if isinstance(line, list)]
    end = next((line for line in lines if isinstance(line, dict)), {})
    return batches, end


def expected_ids(epochs: int) -> list[list[int]]:
    """The ids of the batches an uninterrupted fit trains on, read from the pipeline itself:
    one pass over all its epochs, or (without steps_per_epoch) a pass per epoch, each the
    pipeline's next epoch."""
    return [features["id"].tolist() for features, _ in pipeline(epochs)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[list, dict]:
    tmp = tmp_path_factory.mktemp("uninterrupted")
    return run(
        tmp,
        "straight",
        "--backup",
        str(tmp / "backup"),
        "--steps-per-epoch",
        "12",
        "--save-freq",
        "5",
    )


@pytest.mark.slow
def test_uninterrupted_fit_trains_on_the_pipelines_batches_in_order(uninterrupted):
    pytest.importorskip("keras")
    assert uninterrupted[0] == expected_ids(3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "steps_per_epoch, save_freq, kill_at, saved_at",
    [
        (12, "epoch", 17, 12),  # killed in epoch 2: resumes at its start, data right after step 12
        (12, "5", 22, 20),  # backup mid-epoch: resumed epoch 2 is cut where it would have ended
        (0, "epoch", 17, 12),  # each Keras epoch a pass: the pipeline's next epoch
    ],
)
def test_killed_fit_resumes_on_the_batches_it_would_have_seen(
    tmp_path, uninterrupted, steps_per_epoch, save_freq, kill_at, saved_at
):
    pytest.importorskip("keras")
    expected = expected_ids(3)
    common = [
        "--backup",
        str(tmp_path / "backup"),
        "--epochs",
        "3",
        "--steps-per-epoch",
        str(steps_per_epoch),
        "--save-freq",
        save_freq,
    ]
    killed, _ = run(tmp_path, "killed", *common, "--kill-at", str(kill_at), killed=True)
    assert killed == expected[:kill_at]
    resumed, end = run(tmp_path, "resumed", *common)
    assert killed[:saved_at] + resumed == expected
    # the same model, optimizer and batches: the same weights
    assert end["weights"] == pytest.approx(uninterrupted[1]["weights"], rel=1e-5)
    assert not (tmp_path / "backup").exists()  # finished: the backup is deleted, as Keras does


def small_model():
    keras = pytest.importorskip("keras")
    inputs = {"x": keras.Input((4,), name="x"), "id": keras.Input((), dtype="int64", name="id")}
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs["x"]))
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def test_mid_epoch_backups_without_steps_per_epoch_or_in_short_passes_are_refused(tmp_path):
    from tpufeed.adapters.keras import BackupAndRestore
    from tpufeed.errors import InvalidArgumentError

    def fit(train_ds, **kwargs):
        backup = BackupAndRestore(train_ds, str(tmp_path / "b"), save_freq=5)
        small_model().fit(train_ds, epochs=3, callbacks=[backup], verbose=0, **kwargs)

    unknown = pipeline(1).filter(lambda e: True).to_tf()  # a length Keras cannot know
    with pytest.raises(InvalidArgumentError, match=r"save_freq=5.*steps_per_epoch"):
        fit(unknown)
    with pytest.raises(InvalidArgumentError, match=r"a pass has 12 batches.*36 batches"):
        fit(pipeline(1).to_tf())  # a pass an epoch: a restart mid-pass would end it early
    with pytest.raises(InvalidArgumentError, match=r"a pass has 24 batches.*36 batches"):
        fit(pipeline(2).to_tf(), steps_per_epoch=12)


def fit_ids(epochs: int, **fit) -> list[list[int]]:
    """The ids of the batches a plain `fit(pipeline(1).to_tf(), epochs)` trains on, in order,
    with the warnings it gave (`fit` keyword arguments: `validation_data`, ...)."""
    keras = pytest.importorskip("keras")
    import tensorflow as tf

    seen: list[list[int]] = []

    class Spy(keras.layers.Layer):
        def call(self, inputs, training=None):
            if training:
                log = lambda ids: seen.append(ids.numpy().tolist()) or ids  # noqa: E731
                ids = tf.py_function(log, [inputs["id"]], tf.int64)
                return inputs["x"] + 0.0 * tf.cast(tf.reduce_sum(ids), tf.float32)
            return inputs["x"]

    keras.utils.set_random_seed(0)
    inputs = {"x": keras.Input((4,), name="x"), "id": keras.Input((), dtype="int64", name="id")}
    model = keras.Model(inputs, keras.layers.Dense(2)(Spy()(inputs)))
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    model.fit(pipeline(1).to_tf(), epochs=epochs, verbose=0, **fit)
    return seen


def test_plain_fit_sees_each_epoch_in_a_fresh_order_with_no_warning(recwarn):
    trained = fit_ids(3, validation_data=pipeline(1).to_tf())
    assert trained == expected_ids(3)  # each Keras epoch the pipeline's next epoch
    epochs = [sorted(map(tuple, trained[i : i + 12])) for i in range(0, 36, 12)]
    assert trained[:12] != trained[12:24] != trained[24:] and epochs[0] != epochs[1]
    assert fit_ids(3) == trained  # and the same on every run
    messages = [str(w.message) for w in recwarn]
    assert not [m for m in messages if "ran out of data" in m or "repeats" in m], messages


def test_a_backup_without_data_states_is_refused(tmp_path):
    keras = pytest.importorskip("keras")
    from tpufeed.adapters.keras import BackupAndRestore
    from tpufeed.errors import InvalidArgumentError, StateError

    with pytest.raises(InvalidArgumentError, match="Dataset.to_tf.*not list"):
        BackupAndRestore([1, 2], str(tmp_path / "b"))

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 6:
                raise KeyboardInterrupt

    model = small_model()
    with pytest.raises(KeyboardInterrupt):  # Keras' own callback: the data position is lost
        model.fit(
            pipeline(2).to_tf(),
            epochs=2,
            steps_per_epoch=12,
            verbose=0,
            callbacks=[
                keras.callbacks.BackupAndRestore(str(tmp_path / "b"), save_freq=5),
                Interrupt(),
            ],
        )
    train_ds = pipeline(2).to_tf()
    with pytest.raises(StateError, match=r"optimizer step 5.*tpufeed_data.json does not exist"):
        model.fit(
            train_ds,
            epochs=2,
            steps_per_epoch=12,
            verbose=0,
            callbacks=[BackupAndRestore(train_ds, str(tmp_path / "b"), save_freq=5)],
        )


def test_the_first_batches_are_made_while_keras_restores_the_model(tmp_path):
    """BackupAndRestore sets the backup's data state and starts its first batches (it.start())
    before Keras loads the weights, so they are made meanwhile; the resumed batches are exact."""
    keras = pytest.importorskip("keras")
    from tpufeed.adapters.keras import BackupAndRestore

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 6:
                raise KeyboardInterrupt

    def fit(train_ds, backup, *more):
        small_model().fit(
            train_ds, epochs=2, steps_per_epoch=12, verbose=0, callbacks=[backup, *more]
        )

    def recorded(made: list[list[int]]):
        batches = pipeline(2).map(lambda b: made.append(b[0]["id"].tolist()) or b)
        return batches.prefetch(0).to_tf()  # no prefetch thread: only start() begins early

    first = recorded([])
    with pytest.raises(KeyboardInterrupt):
        fit(first, BackupAndRestore(first, str(tmp_path / "b"), save_freq=5), Interrupt())
    made: list[list[int]] = []  # the batches the resumed pipeline made, in order
    resumed = recorded(made)
    made.clear()  # to_tf() ran the map once on a stand-in batch, for the element spec

    class Watched(BackupAndRestore):
        def _load_model(self):
            deadline = time.monotonic() + 30
            while not made and time.monotonic() < deadline:
                time.sleep(0.01)  # the batches begun before the restore, on their thread
            self.made_before_restore = list(made)
            super()._load_model()

    watched = Watched(resumed, str(tmp_path / "b"), save_freq=5)
    fit(resumed, watched)
    assert watched.made_before_restore, "no batch was made while the model restored"
    assert made[: len(watched.made_before_restore)] == watched.made_before_restore
    assert made[:19] == expected_ids(2)[5:24]  # right after the backup's step 5, to the end


if __name__ == "__main__":
    train(sys.argv[1:])
