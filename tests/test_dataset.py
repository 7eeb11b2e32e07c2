"""The Dataset API: chaining, validation, batching, and errors that name their cause."""

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import (
    BatchError,
    InvalidArgumentError,
    RecordIndexError,
    SourceError,
    TpufeedError,
    TransformError,
)


def seq(n=10):
    return tpufeed.Dataset.from_sequence(list(range(n)))


def test_public_names_are_sorted_and_exported():
    assert tpufeed.__all__ == sorted(tpufeed.__all__)
    for name in tpufeed.__all__:
        assert hasattr(tpufeed, name)
    for name in dir(tpufeed.errors):
        obj = getattr(tpufeed.errors, name)
        if (
            isinstance(obj, type)
            and issubclass(obj, Exception)
            and obj.__module__ == "tpufeed.errors"
        ):
            assert issubclass(obj, TpufeedError)


def test_every_method_returns_a_new_dataset():
    ds = seq()
    chained = (
        ds.shuffle(1).shard(0, 2).map(str).filter(bool).batch(2).repeat(3).prefetch(1).workers(0)
    )
    assert list(ds) == list(range(10))
    assert chained is not ds and len(list(chained)) == 9


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda ds: ds.batch(0), "batch_size must be a positive int, got 0"),
        (lambda ds: ds.batch(-3), "got -3"),
        (lambda ds: ds.batch(2.5), "got 2.5"),
        (lambda ds: ds.batch(2).batch(2), "already set"),
        (lambda ds: ds.shard(-1, 2), "shard index must be >= 0, got -1"),
        (lambda ds: ds.shard(2, 2), "shard index 2 is not below shard count 2"),
        (lambda ds: ds.shard(0, 0), "shard count must be >= 1, got 0"),
        (lambda ds: ds.shuffle("x"), "seed must be an int"),
        (lambda ds: ds.shuffle(1).shuffle(2), "already set"),
        (lambda ds: ds.repeat(-1), "got -1"),
        (lambda ds: ds.prefetch(-2), "got -2"),  # -1 is tf.data.AUTOTUNE: "auto"
        (lambda ds: ds.workers(-2), "got -2"),
        (lambda ds: ds.map(3), "needs a callable, got 3"),
    ],
)
def test_bad_arguments_raise_naming_the_value(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call(seq())


def test_shard_index_beyond_count_from_jax_is_caught():
    with pytest.raises(InvalidArgumentError, match="shard index 5 is not below shard count 1"):
        seq().shard(index=5).iterator()


def test_batch_stacks_dicts_tuples_and_arrays():
    ds = seq(4).map(
        lambda i: {"a": np.full((2, 3), i, np.float32), "b": (i, np.int8(i)), "s": f"s{i}"}
    )
    batch = next(iter(ds.batch(4)))
    assert batch["a"].shape == (4, 2, 3) and batch["a"].dtype == np.float32
    assert batch["b"][0].tolist() == [0, 1, 2, 3] and batch["b"][1].dtype == np.int8
    assert batch["s"].tolist() == ["s0", "s1", "s2", "s3"]


def test_batch_says_which_key_and_which_shapes_differ():
    ds = seq(6).map(lambda i: {"x": np.zeros(3 if i != 4 else 5)}).batch(6)
    with pytest.raises(
        BatchError, match=r"\['x'\].*record 0 has shape \(3,\) but record 4 has shape \(5,\)"
    ):
        list(ds)


def test_batch_says_which_keys_differ():
    ds = seq(3).map(lambda i: {"x": 1} if i != 2 else {"y": 1}).batch(3)
    with pytest.raises(BatchError, match=r"keys \['x'\] but record 2 has \['y'\]"):
        list(ds)


def test_a_failing_map_names_the_stage_record_and_traceback():
    def explode(i):
        if i == 7:
            raise KeyError("missing label")
        return i

    with pytest.raises(TransformError, match=r"map\(.*explode\) raised KeyError.*record 7") as info:
        list(seq().map(explode))
    assert info.value.record == 7
    assert "explode" in info.value.traceback_text


def test_a_failing_source_is_wrapped_with_the_record():
    class Flaky:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            if i == 3:
                raise OSError("disk on fire")
            return i

    with pytest.raises(SourceError, match="disk on fire"):
        list(tpufeed.Dataset.from_source(Flaky()))


def test_from_source_takes_any_len_getitem_object_and_exposes_it():
    class Squares:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return i * i

    ds = tpufeed.Dataset.from_source(Squares()).shuffle(0)
    assert sorted(ds) == [0, 1, 4, 9, 16, 25]
    assert isinstance(ds.source, Squares)


def test_from_source_getitems_gets_a_list_of_ints_as_the_protocol_says():
    class ListOnly:  # as TFDS's data sources: `if not keys:` refuses an array
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return i

        def __getitems__(self, keys):
            assert type(keys) is list and all(type(k) is int for k in keys), type(keys)
            if not keys:
                return []
            return [k * 10 for k in keys]

    ds = tpufeed.Dataset.from_source(ListOnly()).shuffle(0).batch(4)
    assert sorted(int(x) for batch in ds for x in batch) == list(range(0, 100, 10))


def test_from_source_rejects_objects_without_the_protocol():
    with pytest.raises(InvalidArgumentError, match="__len__ and __getitem__"):
        tpufeed.Dataset.from_source(object())


def test_sequence_source_index_errors_are_tpufeed_errors():
    with pytest.raises(
        RecordIndexError, match="record index 10 is out of range for a source of 10"
    ):
        seq().source[10]


def test_a_filter_that_drops_everything_does_not_loop_forever():
    with pytest.raises(TpufeedError, match="loop forever"):
        list(seq().filter(lambda i: False).repeat())


def test_more_hosts_than_records_gives_empty_shares_not_errors():
    assert list(seq(2).shard(5, 8)) == []


def test_repeat_zero_epochs_is_empty_and_repeat_none_is_endless():
    assert list(seq().repeat(0)) == []
    it = iter(seq(3).repeat())
    assert [next(it) for _ in range(10)] == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]


def test_iterator_is_a_context_manager_and_close_is_idempotent():
    with seq().prefetch(2).iterator() as it:
        assert next(it) == 0
    it.close()
    with pytest.raises(StopIteration):
        next(it)


def test_prefetch_thread_reraises_errors_in_the_consumer():
    ds = seq().map(lambda i: 1 // (i - 5)).prefetch(3)
    it = iter(ds)
    with pytest.raises(TransformError, match="ZeroDivisionError"):
        list(it)


def test_repr_shows_the_pipeline():
    text = repr(seq().shuffle(3).map(str).batch(2))
    assert "seed=3" in text and "map(str)" in text and "batch(2, drop_remainder=False)" in text


def flaky_decode(record):
    if record in (3, 11, 12):
        raise ValueError(f"cannot decode {record}")
    return {"x": np.int64(record)}


@pytest.mark.parametrize("workers", [0, 2])
def test_ignore_errors_skips_counts_and_bounds_bad_records(workers, caplog):
    ds = seq(20).map(flaky_decode).batch(4).workers(workers)
    with pytest.raises(TransformError, match="cannot decode 3"):
        list(ds)
    it = ds.ignore_errors(3).iterator()
    got = [b["x"].tolist() for b in it]
    assert got == [[0, 1, 2, 4], [5, 6, 7, 8], [9, 10, 13, 14], [15, 16, 17, 18], [19]]
    assert it.stats().errors == 3
    assert sum("skipped a bad record" in r.message for r in caplog.records) == 3
    with pytest.raises(TransformError, match="cannot decode 12") as info:
        list(ds.ignore_errors(2))
    said = str(info.value) + "".join(getattr(info.value, "__notes__", []))  # 3.10: no notes
    assert "ignore_errors(2) skips at most 2" in said


def test_ignore_errors_skips_unreadable_records():
    class HalfBroken:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 6:
                raise OSError("bad sector")
            return i

    ds = tpufeed.Dataset.from_source(HalfBroken()).ignore_errors(1)
    it = ds.iterator()
    assert list(it) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert it.stats().errors == 1
    with pytest.raises(SourceError, match="bad sector"):
        list(tpufeed.Dataset.from_source(HalfBroken()))


def test_len_is_the_items_this_host_yields_where_the_record_count_decides_it():
    """Every epoch counts (tests/adapters/test_len.py: the same on to_tf and to_torch)."""
    seq = lambda n: tpufeed.Dataset.from_sequence(list(range(n)))  # noqa: E731
    assert len(seq(10)) == 10 and len(seq(10).batch(3)) == 4
    assert len(seq(10).batch(3, drop_remainder=True)) == 3
    assert [len(seq(10).shard(h, 3).batch(2)) for h in range(3)] == [2, 2, 2]
    assert len(seq(10).map(lambda x: x).batch(5).repeat(3)) == 6  # every epoch
    for unknown in (
        seq(10).filter(bool),
        seq(10).flat_map(lambda x: [x]),
        tpufeed.Dataset.mix([seq(3), seq(4)]),
    ):
        with pytest.raises(TypeError, match="depend on the data"):
            len(unknown)


def test_tpufeed_version():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "tpufeed.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"tpufeed {tpufeed.__version__}"


def test_many_skipped_records_are_summarised_not_logged_one_by_one(caplog):
    ds = seq(1000).map(lambda r: 1 / 0 if r % 10 == 0 else r).ignore_errors(200)
    it = ds.iterator()
    assert len(list(it)) == 900
    assert it.stats().errors == 100
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(lines) == 5  # three one by one, then at 10 and 100
    assert "skipped 100 bad records so far (of at most 200)" in lines[-1]
    assert "100 x map(<lambda>) raised ZeroDivisionError" in lines[-1]


def test_a_state_checks_stage_kinds_and_settings_but_not_function_code():
    """As the README says: fixing a bug in a transform keeps the checkpoint; other stages don't."""
    from tpufeed.errors import StateError

    base = seq(20).shuffle(1)
    it = base.map(lambda r: r * 2).batch(4).iterator()
    next(it)
    state = it.get_state()
    fixed = base.map(lambda r: r * 2 + 0).batch(4)  # another function, same stages
    assert [b.tolist() for b in fixed.iterator(state)] == [b.tolist() for b in it]
    for other in (
        base.map(lambda r: r).batch(5),
        base.filter(bool).batch(4),
        base.map(lambda r: r).map(lambda r: r).batch(4),
        seq(20).shuffle(2).map(int).batch(4),
    ):
        with pytest.raises(StateError, match="another dataset or pipeline"):
            other.iterator(state)


@pytest.mark.parametrize(
    "values", [[1, "s"], [1.5, b"x"], [np.int32(3), "x"], ["x", 3], ["x", b"y"], [1, None]]
)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_key_of_mixed_types_is_refused_not_turned_into_strings(values, workers):
    ds = tpufeed.Dataset.from_sequence([{"a": v} for v in values]).batch(2).workers(workers)
    with pytest.raises(BatchError, match=r"\['a'\].*element|record"):
        list(ds)


def test_values_of_one_kind_still_batch():
    ds = tpufeed.Dataset.from_sequence([{"a": True, "s": "x"}, {"a": 2, "s": np.str_("y")}]).batch(
        2
    )
    (batch,) = list(ds)
    assert batch["a"].tolist() == [1, 2] and batch["s"].tolist() == ["x", "y"]


def test_a_source_whose_len_is_broken_is_named():
    class Negative:
        def __len__(self):
            return -3

        def __getitem__(self, i):
            return i

    with pytest.raises(InvalidArgumentError, match="len\\(\\) of the source Negative failed"):
        list(tpufeed.Dataset.from_source(Negative()))


@pytest.mark.multiprocess
def test_a_function_workers_cannot_receive_or_send_is_named():
    import threading

    lock = threading.Lock()

    def locked(i):
        with lock:
            return i

    with pytest.raises(
        InvalidArgumentError, match=r"map\(locked\) cannot be pickled.*workers\(0\)"
    ):
        list(seq(10).map(lambda i: i).map(locked).workers(2))
    with pytest.raises(TransformError, match="cannot be sent from a worker process"):
        list(seq(10).map(lambda i: threading.Lock()).workers(2, isolate=True))
