"""Keras 3 (TensorFlow backend) `fit` over several epochs with `validation_data`, on
`to_tf()`: every epoch trains on the pipeline's next epoch, in a fresh order, and validates on
the whole validation set, each record once (an unshuffled one in the same batches every
epoch); with tpufeed's BackupAndRestore too; no "ran out of data" and no repeat warning."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

TRAIN, VAL, BATCH, EPOCHS = 40, 14, 4, 3


def element(i):
    x = np.array([np.sin(i), np.cos(i), i % 3, 1.0], np.float32)
    return {"x": x, "id": np.int64(i)}, np.int32(i % 2)


def train_pipeline(epochs=1):
    ds = tpufeed.Dataset.from_sequence(list(range(TRAIN))).shuffle(seed=4).map(element)
    return ds.batch(BATCH, drop_remainder=True).repeat(epochs)


def val_pipeline(shuffled):
    ds = tpufeed.Dataset.from_sequence(list(range(1000, 1000 + VAL)))
    return (ds.shuffle(seed=1) if shuffled else ds).map(element).batch(BATCH)


def spied_model(seen):
    """A model whose layer logs the ids of each batch it sees: ("train" | "val", ids)."""

    class Spy(keras.layers.Layer):
        def call(self, inputs, training=None):
            kind = "train" if training else "val"
            log = lambda ids: seen.append((kind, ids.numpy().tolist())) or ids  # noqa: E731
            ids = tf.py_function(log, [inputs["id"]], tf.int64)
            return inputs["x"] + 0.0 * tf.cast(tf.reduce_sum(ids), tf.float32)

    keras.utils.set_random_seed(0)
    inputs = {"x": keras.Input((4,), name="x"), "id": keras.Input((), dtype="int64", name="id")}
    model = keras.Model(inputs, keras.layers.Dense(2)(Spy()(inputs)))
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    return model


def epochs_seen(seen, kind):
    """Batches of `kind`, grouped by the Keras epoch they came in."""
    groups, current, last = [], [], None
    for what, ids in seen:
        if what != last and what == "train" and current:
            groups.append(current)
            current = []
        if what == kind:
            current.append(ids)
        last = what
    return [g for g in groups + [current] if g]


@pytest.mark.slow
@pytest.mark.parametrize("shuffled_val", [False, True])
def test_fit_trains_on_fresh_epochs_and_validates_on_the_whole_set_each_epoch(
    shuffled_val, recwarn
):
    seen: list = []
    history = spied_model(seen).fit(
        train_pipeline().to_tf(),
        epochs=EPOCHS,
        validation_data=val_pipeline(shuffled_val).to_tf(),
        verbose=0,
    )
    assert len(history.history["val_loss"]) == EPOCHS
    trained = epochs_seen(seen, "train")
    expected = [f["id"].tolist() for f, _ in train_pipeline(EPOCHS)]
    assert sum(trained, []) == expected and [len(t) for t in trained] == [10] * EPOCHS
    assert trained[0] != trained[1] != trained[2]
    validated = epochs_seen(seen, "val")
    assert len(validated) == EPOCHS
    for batches in validated:
        assert sorted(i for b in batches for i in b) == list(range(1000, 1000 + VAL))
    if not shuffled_val:
        assert validated[0] == validated[1] == validated[2]
    messages = [str(w.message) for w in recwarn]
    assert not [m for m in messages if "ran out of data" in m or "repeats" in m], messages


@pytest.mark.slow
def test_fit_with_tpufeeds_backup_callback_keeps_both_meanings(tmp_path):
    from tpufeed.adapters.keras import BackupAndRestore

    seen: list = []
    train = train_pipeline().to_tf()
    spied_model(seen).fit(
        train,
        epochs=EPOCHS,
        validation_data=val_pipeline(False).to_tf(),
        callbacks=[BackupAndRestore(train, str(tmp_path / "backup"))],
        verbose=0,
    )
    expected = [f["id"].tolist() for f, _ in train_pipeline(EPOCHS)]
    assert sum(epochs_seen(seen, "train"), []) == expected
    validated = epochs_seen(seen, "val")
    assert len(validated) == EPOCHS and validated[0] == validated[1] == validated[2]
