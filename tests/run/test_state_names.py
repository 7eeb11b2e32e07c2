"""`state_dict()` / `load_state_dict(state)` on every iterator tpufeed hands out: the same as
`get_state()` / `set_state(state)`, under torch's names (tpufeed.run.state_names)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import tpufeed


def records(n=20):
    return (
        tpufeed.Dataset.from_sequence(list(range(n))).shuffle(4).map(lambda r: {"id": np.int64(r)})
    )


def batched():
    return records().batch(3, drop_remainder=True).repeat(2)


def ids(item):
    """The record ids of an item of any framework, as a list."""
    leaf = item["id"]
    leaf = leaf.numpy() if hasattr(leaf, "numpy") else leaf
    return np.atleast_1d(np.asarray(leaf)).tolist()


def mixture():
    a, b = records(8), records(12).map(lambda e: {"id": e["id"] + 100})
    return tpufeed.Dataset.mix([a, b], weights=[1, 2], on_end="stop").batch(2)


def after_one(ds):
    it = ds.iterator()
    next(it)
    return it.get_state()


ITERATORS = {  # what a loop calls next() on
    "iter(ds)": lambda: iter(batched()),
    "ds.iterator(state)": lambda: batched().iterator(after_one(batched())),
    "mixture": lambda: iter(mixture()),
    "ds.iterator(uneven=...)": lambda: batched().iterator(uneven="pad"),
    "to_jax()": lambda: batched().to_jax(),
    "iter(to_torch())": lambda: iter(batched().to_torch()),
}

DATASETS = {  # (what holds the state, what a loop iterates: each pass starts at the state)
    "to_torch()": lambda: (lambda d: (d, d))(batched().to_torch()),
    "to_tf()": lambda: (lambda d: (d, d))(batched().to_tf()),
    "to_tf().tpufeed": lambda: (lambda d: (d.tpufeed, d))(batched().to_tf()),
}

FRAMEWORK = {"jax": "jax", "torch": "torch", "tf": "tensorflow"}


def needs_framework(kind):
    for word, module in FRAMEWORK.items():
        if f"to_{word}" in kind:
            pytest.importorskip(module)


@pytest.mark.parametrize("kind", sorted(ITERATORS))
def test_an_iterators_torch_names_are_get_state_and_set_state(kind):
    needs_framework(kind)
    it = ITERATORS[kind]()
    next(it)
    saved = it.state_dict()
    assert saved == it.get_state()
    rest = [ids(item) for item in it]
    assert rest, "nothing followed the first item: nothing to check"
    it.load_state_dict(saved)
    assert it.state_dict() == saved
    assert [ids(item) for item in it] == rest
    it.close()


@pytest.mark.parametrize("kind", sorted(DATASETS))
def test_a_datasets_torch_names_are_get_state_and_set_state(kind):
    needs_framework(kind)
    holder, dataset = DATASETS[kind]()
    it = iter(dataset)
    next(it)
    saved = holder.state_dict()
    assert saved == holder.get_state()
    rest = [ids(item) for item in it]
    assert rest, "nothing followed the first item: nothing to check"
    holder.load_state_dict(saved)  # the next pass starts there
    assert holder.state_dict() == saved
    assert [ids(item) for item in dataset] == rest


def test_every_class_with_set_state_has_the_torch_names():
    """A new iterator (or adapter) class cannot miss the aliases: every class of the run and
    adapter packages that restores a state with `set_state` also has both torch names."""
    import tpufeed.adapters
    import tpufeed.run

    missing, checked = [], []
    for package in (tpufeed.run, tpufeed.adapters):
        for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(module_info.name)
            for name, cls in inspect.getmembers(module, inspect.isclass):
                protocol = getattr(cls, "_is_protocol", False)  # a type, not an object's class
                if cls.__module__ != module.__name__ or protocol or not hasattr(cls, "set_state"):
                    continue
                checked.append(name)
                if not (hasattr(cls, "state_dict") and hasattr(cls, "load_state_dict")):
                    missing.append(f"{module.__name__}.{name}")
    assert not missing
    assert {"DatasetIterator", "JaxIterator", "TorchIterable", "TfDataset"} <= set(checked)
