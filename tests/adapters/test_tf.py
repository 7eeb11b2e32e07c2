"""`to_tf` (issue 5 item 2): a real tf.data.Dataset with the right element_spec, fit-able."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import BatchError, StateError

tf = pytest.importorskip("tensorflow")

N = 40


def make(n=N, batch=8, drop=False, epochs=1, structure=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n))).shuffle(1)
    ds = ds.map(lambda r: {"id": np.int64(r), "x": np.full((2, 3), r, np.float32), "name": f"r{r}"})
    if structure is not None:
        ds = ds.map(structure)
    return ds.batch(batch, drop_remainder=drop).repeat(epochs)


def test_element_spec_comes_from_the_first_batch():
    spec = make().to_tf().element_spec
    assert spec == {
        "id": tf.TensorSpec((None,), tf.int64),
        "x": tf.TensorSpec((None, 2, 3), tf.float32),
        "name": tf.TensorSpec((None,), tf.string),
    }
    fixed = make(drop=True).to_tf().element_spec
    assert fixed["x"] == tf.TensorSpec((8, 2, 3), tf.float32)


def test_yields_exactly_the_pipelines_batches_on_every_pass():
    expected = list(make(epochs=2))
    tf_ds = make(epochs=2).to_tf()
    for _ in range(2):  # each pass over a tf.data.Dataset starts the pipeline from the start
        got = list(tf_ds.as_numpy_iterator())
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a["id"].tolist() == b["id"].tolist()
            assert np.array_equal(a["x"], b["x"])
            assert [s.decode() for s in a["name"]] == b["name"].tolist()


def test_tuples_and_namedtuples_keep_their_structure():
    Pair = namedtuple("Pair", "x y")
    assert isinstance(make(structure=lambda e: (e["x"], [e["id"]])).to_tf().element_spec, tuple)
    spec = make(structure=lambda e: Pair(e["x"], e["id"])).to_tf().element_spec
    assert type(spec).__name__ == "Pair" and spec.y == tf.TensorSpec((None,), tf.int64)


def test_works_with_keras_model_fit():
    keras = tf.keras
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(2, 4)).astype(np.float32) * 3
    points = [
        (centers[i % 2] + rng.normal(size=4).astype(np.float32) * 0.3, np.int32(i % 2))
        for i in range(64)
    ]
    epochs = 5
    tf_ds = tpufeed.Dataset.from_sequence(points).shuffle(0).batch(16).repeat(epochs).to_tf()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        metrics=["accuracy"],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(tf_ds, epochs=epochs, steps_per_epoch=4, shuffle=False, verbose=0)
    assert history.history["accuracy"][-1] > 0.9


def test_unusable_pipelines_say_why():
    with pytest.raises(BatchError, match="yields nothing"):
        tpufeed.Dataset.from_sequence([]).batch(4).to_tf()
    with pytest.raises(BatchError, match=r"\['obj'\].*NoneType"):
        tpufeed.Dataset.from_sequence(list(range(4))).map(lambda r: {"obj": None}).batch(2).to_tf()


def test_reports_how_long_tensorflow_waited_for_input():
    import time

    def slow(e):
        time.sleep(0.003)
        return e

    base = tpufeed.Dataset.from_sequence(list(range(160))).map(lambda i: np.full(4, i, np.float32))
    bound = base.map(slow).batch(16, drop_remainder=True).to_tf()
    for _ in bound:
        pass
    assert bound.tpufeed.wait_fraction > 0.5
    stats = bound.tpufeed.stats()
    assert stats.bottleneck == "map(slow)" and stats.batches == 10
    fed = base.batch(16, drop_remainder=True).prefetch(2).to_tf()
    for _ in fed:
        time.sleep(0.03)
    assert fed.tpufeed.wait_fraction < 0.3


def ids(batches):
    return [b["id"].tolist() for b in batches]


def test_get_state_is_after_the_last_batch_the_loop_took_and_resumes_there():
    expected = ids(make(epochs=2))
    tf_ds = make(epochs=2).to_tf()
    assert tf_ds.get_state() == make(epochs=2).iterator().get_state()  # before any pass: the start
    for stop in (0, 3, 7):
        it = iter(tf_ds)
        for _ in range(stop):
            next(it)
        state = tf_ds.get_state()
        assert ids(make(epochs=2).iterator(state)) == expected[stop:]
        assert ids(make(epochs=2).to_tf(state=state).as_numpy_iterator()) == expected[stop:]


def test_set_state_starts_the_next_pass_there_and_later_passes_at_the_start():
    expected = ids(make(epochs=2))
    tf_ds = make(epochs=2).to_tf()
    it = iter(tf_ds)
    for _ in range(4):
        next(it)
    state = tf_ds.get_state()
    tf_ds.set_state(state)
    assert tf_ds.get_state() == state
    assert next(it)["id"].numpy().tolist() == expected[4]  # the running pass goes on
    assert ids(tf_ds.as_numpy_iterator()) == expected[4:]
    assert ids(tf_ds.as_numpy_iterator()) == expected
    tf_ds.set_state([state])  # the list of every host's states (one host here)
    assert ids(tf_ds.as_numpy_iterator()) == expected[4:]


def test_state_after_gives_the_state_after_any_recent_batch_of_the_pass():
    expected = ids(make(epochs=2))
    tf_ds = make(epochs=2).to_tf()
    taken = list(tf_ds.as_numpy_iterator())
    assert tf_ds.tpufeed.batches == len(taken) and tf_ds.tpufeed.finished
    for count in (0, 1, 5, len(taken)):
        assert ids(make(epochs=2).iterator(tf_ds.tpufeed.state_after(count))) == expected[count:]
    with pytest.raises(StateError, match=r"batch 11 of pass 1.*0\.\.10"):
        tf_ds.tpufeed.state_after(11)


def test_a_bad_state_is_refused_and_changes_nothing():
    tf_ds = make().to_tf()
    other = tpufeed.Dataset.from_sequence(list(range(7))).batch(2).iterator().get_state()
    with pytest.raises(StateError):
        tf_ds.set_state(other)
    assert ids(tf_ds.as_numpy_iterator()) == ids(make())


def test_tf_train_checkpoint_of_the_iterator_says_which_tpufeed_api_to_use(tmp_path):
    tf_ds = make().to_tf()
    it = iter(tf_ds)
    next(it)
    with pytest.raises(StateError, match=r"tf.train.Checkpoint cannot save.*tf_ds.get_state\(\)"):
        tf.train.Checkpoint(data=it).save(str(tmp_path / "ckpt"))
    state = tf_ds.get_state()  # what to save instead
    assert ids(make().to_tf(state=state).as_numpy_iterator()) == ids(make())[1:]
