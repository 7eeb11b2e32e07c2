"""`to_tf` (issue 5 item 2): a real tf.data.Dataset with the right element_spec, fit-able."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import BatchError, InvalidArgumentError, StateError

tf = pytest.importorskip("tensorflow")

N = 40


def make(n=N, batch=8, drop=False, epochs=1, structure=None):
    ds = tpufeed.Dataset.from_sequence(list(range(n))).shuffle(1)
    ds = ds.map(lambda r: {"id": np.int64(r), "x": np.full((2, 3), r, np.float32), "name": f"r{r}"})
    if structure is not None:
        ds = ds.map(structure)
    return ds.batch(batch, drop_remainder=drop).repeat(epochs)


def test_element_spec_is_the_pipelines_with_the_batch_dimension_fixed_by_drop_remainder():
    spec = make().to_tf().element_spec
    assert spec == {
        "id": tf.TensorSpec((None,), tf.int64),
        "x": tf.TensorSpec((None, 2, 3), tf.float32),
        "name": tf.TensorSpec((None,), tf.string),
    }
    fixed = make(drop=True).to_tf().element_spec
    assert fixed["x"] == tf.TensorSpec((8, 2, 3), tf.float32)
    mapped = make(drop=True).map(lambda b: (b["x"] * 2, b["id"])).to_tf()  # a map after batch
    assert mapped.element_spec == (
        tf.TensorSpec((8, 2, 3), tf.float32),
        tf.TensorSpec((8,), tf.int64),
    )
    assert [tuple(x.shape) for x, _ in mapped] == [(8, 2, 3)] * 5


def test_each_pass_is_the_pipelines_next_epochs_as_repeat_would_go_on():
    expected = ids(make(epochs=6))  # 5 batches an epoch
    tf_ds = make(epochs=2).to_tf()
    for p in range(3):  # each pass over the dataset (each Keras epoch): two epochs more
        assert ids(tf_ds.as_numpy_iterator()) == expected[10 * p : 10 * (p + 1)]
    again = make(epochs=2).to_tf()  # the same passes on every run
    assert ids(again.as_numpy_iterator()) == expected[:10]
    for batch, first in zip(again.take(2), expected[10:12]):  # a pass left early...
        assert batch["id"].numpy().tolist() == first
    assert ids(again.as_numpy_iterator()) == expected[20:30]  # ...shifts none after it
    for host in (0, 1):  # each host's share of the next epochs
        shard = tpufeed.Dataset.from_sequence(list(range(N))).shuffle(1).shard(host, 2).batch(4)
        tf_host = shard.to_tf()
        passes = [[b.tolist() for b in tf_host.as_numpy_iterator()] for _ in range(2)]
        assert passes[0] + passes[1] == [b.tolist() for b in shard.repeat(2)]
    got = list(make(epochs=2).to_tf().as_numpy_iterator())
    for a, b in zip(got, list(make(epochs=2))):
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
    with pytest.raises(InvalidArgumentError, match="no record of the source's 0 makes an item"):
        tpufeed.Dataset.from_sequence([]).batch(4).to_tf()
    with pytest.raises(BatchError, match=r"\['obj'\] holds Python objects"):
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
    assert make(epochs=2).to_tf().get_state() == make(epochs=2).iterator().get_state()
    for stop in (0, 3, 7):
        tf_ds = make(epochs=2).to_tf()
        it = iter(tf_ds)
        for _ in range(stop):
            next(it)
        state = tf_ds.get_state()
        assert ids(make(epochs=2).iterator(state)) == expected[stop:]
        assert ids(make(epochs=2).to_tf(state=state).as_numpy_iterator()) == expected[stop:]


def test_set_state_starts_the_next_pass_there_and_the_passes_after_it_go_on():
    expected = ids(make(epochs=4))
    tf_ds = make(epochs=2).to_tf()
    it = iter(tf_ds)
    for _ in range(4):
        next(it)
    state = tf_ds.get_state()
    tf_ds.set_state(state)
    assert tf_ds.get_state() == state
    assert next(it)["id"].numpy().tolist() == expected[4]  # the running pass goes on
    assert ids(tf_ds.as_numpy_iterator()) == expected[4:10]  # to the end of its two epochs
    assert ids(tf_ds.as_numpy_iterator()) == expected[10:20]
    tf_ds.set_state([state])  # the list of every host's states (one host here)
    assert ids(tf_ds.as_numpy_iterator()) == expected[4:10]
    taken = list(tf_ds.as_numpy_iterator())
    tf_ds.set_state(tf_ds.tpufeed.state_after(len(taken)))  # after the last batch of a pass
    assert ids(tf_ds.as_numpy_iterator()) == ids(make(epochs=6))[20:30]  # the next two epochs


def test_cardinality_and_len_are_known_where_the_pipelines_length_is():
    tf_ds = make(epochs=3).to_tf()
    assert len(tf_ds) == 15 and int(tf_ds.cardinality()) == 15
    assert int(tf_ds.map(lambda b: b["x"]).prefetch(2).cardinality()) == 15  # asserted, so kept
    assert len(list(tf_ds.map(lambda b: b["x"]))) == 15
    forever = tpufeed.Dataset.from_sequence(list(range(8))).batch(4).repeat().to_tf()
    assert int(forever.cardinality()) == tf.data.INFINITE_CARDINALITY
    filtered = tpufeed.Dataset.from_sequence(list(range(8))).filter(lambda i: i % 2).batch(2)
    assert int(filtered.to_tf().cardinality()) == tf.data.UNKNOWN_CARDINALITY
    it = make().iterator()
    next(it)
    mid = make().to_tf(state=it.get_state())  # its first pass is short: length unknown
    it.close()
    assert int(mid.cardinality()) == tf.data.UNKNOWN_CARDINALITY and len(list(mid)) == 4


def test_a_pass_set_mid_epoch_is_short_and_the_next_whole():
    tf_ds = make().to_tf()
    it = iter(tf_ds)
    next(it), next(it)
    tf_ds.set_state(tf_ds.get_state())
    assert len(list(tf_ds)) == 3  # no cardinality assertion on the short pass
    assert ids(tf_ds.as_numpy_iterator()) == ids(make(epochs=2))[5:]


def test_passes_of_an_endless_pipeline_or_a_mixture_repeat_with_a_warning():
    forever = tpufeed.Dataset.from_sequence(list(range(8))).shuffle(0).batch(4).repeat()
    tf_ds = forever.to_tf()
    first = [b.numpy().tolist() for b in tf_ds.take(3)]
    with pytest.warns(RuntimeWarning, match="repeats forever.*set_state"):
        assert [b.numpy().tolist() for b in tf_ds.take(3)] == first
    parts = [tpufeed.Dataset.from_sequence([i] * 4) for i in (1, 2)]
    mixed = tpufeed.Dataset.mix(parts, on_end="stop").batch(2).to_tf()
    once = [b.numpy().tolist() for b in mixed]
    with pytest.warns(RuntimeWarning, match="is a mixture"):
        assert [b.numpy().tolist() for b in mixed] == once


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
    with pytest.raises(StateError):
        make().to_tf(state=other)
    assert ids(tf_ds.as_numpy_iterator()) == ids(make())


def test_tf_train_checkpoint_of_the_iterator_says_which_tpufeed_api_to_use(tmp_path):
    tf_ds = make().to_tf()
    it = iter(tf_ds)
    next(it)
    with pytest.raises(StateError, match=r"tf.train.Checkpoint cannot save.*tf_ds.get_state\(\)"):
        tf.train.Checkpoint(data=it).save(str(tmp_path / "ckpt"))
    state = tf_ds.get_state()  # what to save instead
    assert ids(make().to_tf(state=state).as_numpy_iterator()) == ids(make())[1:]
