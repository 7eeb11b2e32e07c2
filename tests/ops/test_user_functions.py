"""The user's functions at a stage's edges: a transform class given without `()` is refused
when the pipeline is built (issue 30, item 12), and whatever a transform raises, BaseExceptions
included, is a TransformError naming the stage, the record and its file (item 4), except a
Ctrl-C and tpufeed's own stops."""

import functools
import signal
import sys
import threading
from typing import Any

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import TransformError
from tpufeed.ops.user_functions import Stopped, is_interruption, uncalled_class
from tpufeed.sources.array_record import write_array_records
from tpufeed.transforms import DecodeImage


class Doubler:
    """A transform class: its instances are the transforms."""

    def __call__(self, x):
        return 2 * x


class Tripler(Doubler):
    """`__call__` inherited counts too."""


def make_pair(x, rng=None):
    return (x, x)


@pytest.mark.parametrize("method", ["map", "random_map", "filter", "flat_map"])
@pytest.mark.parametrize("cls", [Doubler, Tripler, DecodeImage, functools.partial])
def test_a_transform_class_without_parentheses_is_refused_when_the_pipeline_is_built(method, cls):
    ds = tpufeed.Dataset.from_sequence([1, 2])
    name = cls.__name__
    with pytest.raises(
        tpufeed.InvalidArgumentError,
        match=rf"^{method}\({name}\): {name} is a class; did you mean {name}\(\)\? .*"
        rf"`lambda element: {name}\(element\)`",
    ):
        getattr(ds, method)(cls)


def test_classes_whose_instances_are_not_callable_stay_plain_functions():
    ds = tpufeed.Dataset.from_sequence([0, 1.5, 2, 0])
    assert list(ds.map(int).filter(bool)) == [1, 2]
    assert list(ds.map(str).flat_map(tuple)) == ["0", "1", ".", "5", "2", "0"]
    assert [type(x) for x in ds.map(np.float32)] == [np.float32] * 4
    assert list(ds.map(type)) == [int, float, int, int]  # a metaclass: its instances are classes
    assert list(ds.map(Doubler())) == [0, 3.0, 4, 0]  # the instance is the transform
    assert list(ds.map(lambda e: Doubler()(e)).map(Tripler())) == [0, 6.0, 8, 0]


def test_uncalled_class_says_nothing_of_functions_and_instances():
    for fn in (make_pair, Doubler(), len, str.split, np.asarray, int, dict):
        assert uncalled_class(fn) is None, fn
    assert uncalled_class(Tripler) == "Tripler is a class; did you mean Tripler()?"


# -- what a transform raises: BaseExceptions are its failures too (issue 30, item 4) ------------

KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit", "Abort"]
STAGES = ["map", "random_map", "filter", "flat_map", "map_batch", "after_batch"]


def raiser(kind: str) -> Any:
    """A function that raises `kind` (Abort: a BaseException of the user's own)."""

    class Abort(BaseException):
        pass

    def boom(message: str) -> None:
        error = {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt}.get(kind)
        raise (error or {"GeneratorExit": GeneratorExit, "Abort": Abort}[kind])(message)

    return boom


def pipeline(path: str, kind: str, stage: str) -> tpufeed.Dataset:
    """Records b"0".."11" of one file, `stage` raising `kind` on record 5 (on the batch that
    holds it, after batch), batched by 4."""
    boom = raiser(kind)

    def one(x):
        if x == b"5":
            boom("record five")
        return x

    class Batched:
        def __call__(self, x):
            return one(x)

        def map_batch(self, xs):
            return [one(x) for x in xs]

    ds = tpufeed.Dataset.from_array_record(path)
    if stage == "after_batch":
        return ds.batch(4).map(lambda b: one(b"5") if b"5" in list(b) else b)
    add = {
        "map": lambda: ds.map(one),
        "random_map": lambda: ds.random_map(lambda x, rng: one(x)),
        "filter": lambda: ds.filter(lambda x: one(x) is not None),
        "flat_map": lambda: ds.flat_map(lambda x: [one(x)]),
        "map_batch": lambda: ds.map(Batched()),
    }
    return add[stage]().batch(4)


@pytest.fixture
def records(tmp_path):
    path = str(tmp_path / "twelve.array_record")
    write_array_records(path, [str(i).encode() for i in range(12)])
    return path


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process, as in a terminal (pytest started as a
    background job inherits SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def assert_named(error: TransformError, kind: str, stage: str, path: str) -> None:
    record = 4 if stage == "after_batch" else 5
    assert error.record == record and error.path == path, str(error)
    assert f"raised {kind}: record five (on {path} record {record} " in str(error), str(error)
    assert "boom" in error.traceback_text and "record five" in error.traceback_text


# In the main thread a KeyboardInterrupt may be Ctrl-C: see the test after this one.
WHERE_KINDS = [
    (where, kind)
    for where in ["in process", "prefetch thread", "a thread of the user's"]
    for kind in KINDS
    if (where, kind) != ("in process", "KeyboardInterrupt")
]


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("where, kind", WHERE_KINDS)
def test_a_base_exception_from_a_transform_is_a_named_transform_error(
    records, kind, stage, where, ctrl_c_raises
):
    ds = pipeline(records, kind, stage).prefetch(2 if where == "prefetch thread" else 0)
    caught: list[BaseException] = []

    def consume() -> None:
        try:
            list(ds)
        except BaseException as error:  # noqa: BLE001 - checked below
            caught.append(error)

    if where == "a thread of the user's":
        thread = threading.Thread(target=consume)
        thread.start()
        thread.join(60)
    else:
        consume()
    assert len(caught) == 1 and isinstance(caught[0], TransformError), caught
    assert_named(caught[0], kind, stage, records)


@pytest.mark.parametrize("stage", STAGES)
def test_a_keyboard_interrupt_in_the_main_thread_stops_the_iterator_as_ctrl_c(
    records, stage, ctrl_c_raises
):
    """It cannot be told from Ctrl-C there: it passes through, noting the stage."""
    with pytest.raises(KeyboardInterrupt, match="record five") as info:
        list(pipeline(records, "KeyboardInterrupt", stage))
    notes = " ".join(getattr(info.value, "__notes__", []))
    if sys.version_info >= (3, 11):
        assert "(tpufeed: it came while " in notes and "ran" in notes, notes


def test_a_keyboard_interrupt_where_sigint_is_ignored_is_the_transforms_own(records):
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(TransformError) as info:
            list(pipeline(records, "KeyboardInterrupt", "map"))
    finally:
        signal.signal(signal.SIGINT, before)
    assert_named(info.value, "KeyboardInterrupt", "map", records)


def test_ignore_errors_counts_a_base_exception_as_any_transform_failure(records):
    it = pipeline(records, "SystemExit", "map").ignore_errors(1).iterator()
    assert [x for batch in it for x in batch] == [str(i).encode() for i in range(12) if i != 5]
    assert it.stats().errors == 1


def test_the_rule_for_what_passes_through():
    assert is_interruption(Stopped()) and not is_interruption(SystemExit(0))
    assert not is_interruption(GeneratorExit()) and not is_interruption(ValueError())
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert is_interruption(KeyboardInterrupt())
        seen: list[bool] = []
        thread = threading.Thread(target=lambda: seen.append(is_interruption(KeyboardInterrupt())))
        thread.start()
        thread.join()
        assert seen == [False]
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert not is_interruption(KeyboardInterrupt())
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.multiprocess
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_base_exception_in_an_isolated_worker_is_a_named_transform_error(records, kind, stage):
    """No transform runs in this process: a worker ignores SIGINT, so even KeyboardInterrupt is
    the transform's own."""
    with pytest.raises(TransformError) as info:
        list(pipeline(records, kind, stage).workers(1, isolate=True))
    assert_named(info.value, kind, stage, records)
    assert "in tpufeed worker 0:" in str(info.value)


@pytest.mark.multiprocess
@pytest.mark.parametrize("kind", ["SystemExit", "GeneratorExit", "Abort"])
def test_a_base_exception_with_workers_is_a_named_transform_error(records, kind):
    """Wherever the chunk ran (a worker, or this process while the workers start)."""
    with pytest.raises(TransformError) as info:
        list(pipeline(records, kind, "map").workers(2))
    assert_named(info.value, kind, "map", records)
