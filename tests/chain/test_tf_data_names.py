"""tf.data's names on a tpufeed pipeline: each either works as a tf.data user writes it, or is
refused with a message that names the difference (docs/coming-from/tf-data.md's table)."""

from __future__ import annotations

import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.run.autotune import Options


def numbers(n: int = 20) -> tpufeed.Dataset:
    return tpufeed.Dataset.from_sequence(list(range(n)))


def test_prefetch_autotune_is_auto():
    ds = numbers().batch(4).prefetch(-1)
    assert ds._settings.prefetch == "auto"
    assert [b.tolist() for b in ds] == [list(range(i, i + 4)) for i in range(0, 20, 4)]
    with pytest.raises(InvalidArgumentError, match="non-negative int or 'auto'"):
        numbers().prefetch(-2)
    with pytest.raises(InvalidArgumentError):
        numbers().prefetch(True)


def test_options_without_arguments_gets_the_settings_in_force():
    ds = numbers()
    assert ds.options() == Options()
    tuned = ds.options(timeout_s=30).options(log_every_s=60)
    got = tuned.options()
    assert isinstance(got, Options)
    assert (got.timeout_s, got.log_every_s) == (30, 60)  # the second call kept the first's
    assert tuned.options(timeout_s=None).options().timeout_s is None  # None still means off
    assert numbers().with_options(got).options() == got


def test_with_options_refuses_what_is_not_tpufeeds_options():
    with pytest.raises(InvalidArgumentError, match="got builtins.dict"):
        numbers().with_options({"timeout_s": 3})


def test_shard_takes_tf_datas_keywords():
    assert list(numbers().shard(num_shards=4, index=1)) == list(range(1, 20, 4))
    assert list(numbers().shard(index=1, num_shards=4)) == list(numbers().shard(1, 4))
    with pytest.raises(InvalidArgumentError, match="num_shards is tf.data's word"):
        numbers().shard(1, 4, num_shards=4)


def test_shard_in_tf_datas_positional_order_is_refused_naming_it():
    with pytest.raises(InvalidArgumentError) as raised:
        numbers().shard(4, 1)  # tf.data: four shards, the second
    message = str(raised.value)
    assert "shard(index, count)" in message and "shard(1, 4)" in message


def test_ignore_errors_without_a_bound_is_refused_naming_it():
    with pytest.raises(InvalidArgumentError, match=r"needs max_errors.*without bound"):
        numbers().ignore_errors()
    with pytest.raises(InvalidArgumentError, match="needs max_errors"):
        numbers().ignore_errors(log_warning=True)
    ds = numbers().map(lambda x: 1 // (x % 7)).ignore_errors(5, log_warning=True)
    assert len(list(ds)) == 17  # 0, 7 and 14 skipped


def test_cache_without_a_directory_and_bound_is_refused_naming_both(tmp_path):
    with pytest.raises(InvalidArgumentError, match="needs a directory and max_bytes"):
        numbers().cache()
    with pytest.raises(InvalidArgumentError, match="needs a directory and max_bytes"):
        numbers().cache("")  # tf.data's in-memory spelling
    with pytest.raises(InvalidArgumentError, match="needs max_bytes"):
        numbers().cache(str(tmp_path))
    assert list(numbers().cache(str(tmp_path), max_bytes=1 << 20)) == list(range(20))


@pytest.mark.slow
def test_against_tf_data_itself():
    """The same calls on tf.data and on tpufeed give the same elements, or tpufeed refuses."""
    tf = pytest.importorskip("tensorflow")
    tf_ds = tf.data.Dataset.range(20).shard(num_shards=4, index=1).prefetch(tf.data.AUTOTUNE)
    ds = numbers().shard(num_shards=4, index=1).prefetch(tf.data.AUTOTUNE)
    assert [int(x) for x in tf_ds.as_numpy_iterator()] == list(ds)
    assert isinstance(tf_ds.options(), tf.data.Options)
    assert isinstance(ds.options(), Options)  # the getter, as tf.data's
    with pytest.raises(InvalidArgumentError, match="deterministic has no setting"):
        ds.with_options(tf.data.Options())
