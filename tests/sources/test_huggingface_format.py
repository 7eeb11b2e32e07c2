"""A Hugging Face dataset's format and transform are honoured by `from_huggingface`, or
refused naming them, never dropped: tpufeed's rows are `hf[i]`'s for every way of setting one
(`with_format(columns=..., output_all_columns=...)`, "numpy" with and without settings,
`with_transform`, `set_transform`), in the pipeline and in worker processes; formats whose
rows cannot be batched ("torch", "tensorflow", "jax", "arrow", "pandas") are refused
with the call to make instead. Real `datasets.Dataset`s built locally."""

from __future__ import annotations

import datasets  # tpufeed[huggingface]
import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError

N = 12


def build():
    return datasets.Dataset.from_dict(
        {
            "id": list(range(N)),
            "text": [f"doc {i}" for i in range(N)],
            "score": [i / 4 for i in range(N)],
            "tokens": [[i, i + 1, i + 2] for i in range(N)],
        }
    )


def lengths(batch):
    """A transform as the datasets docs write them: on a batch (dict of lists)."""
    return {
        "id": batch["id"],
        "length": [len(t) for t in batch["text"]],
        "upper": [t.upper() for t in batch["text"]],
    }


def doubled(batch):
    return {"twice": [2 * i for i in batch["id"]]}


def set_transformed(hf):
    hf = hf.flatten_indices()  # a copy: set_transform changes the dataset in place
    hf.set_transform(lengths)
    return hf


FORMATS = {
    "columns": lambda hf: hf.with_format(columns=["text", "id"]),
    "columns, all": lambda hf: hf.with_format(columns=["score"], output_all_columns=True),
    "numpy": lambda hf: hf.with_format("numpy"),
    "numpy columns, all": lambda hf: hf.with_format(
        "numpy", columns=["tokens"], output_all_columns=True
    ),
    "numpy dtype": lambda hf: hf.with_format(
        "numpy", columns=["score", "tokens"], dtype=np.float16
    ),
    "with_transform": lambda hf: hf.with_transform(lengths),
    "with_transform columns": lambda hf: hf.with_transform(doubled, columns=["id"]),
    "with_transform columns, all": lambda hf: hf.with_transform(
        doubled, columns=["id"], output_all_columns=True
    ),
    "set_transform": set_transformed,
}


def plain(value):
    """A value as Python data, numpy's and datasets' types alike, dtypes kept apart."""
    if isinstance(value, dict):
        return {key: plain(v) for key, v in value.items()}
    if isinstance(value, (str, bytes)):  # numpy's str_ and bytes_ too
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, (np.ndarray, np.generic)):
        return (value.dtype.kind, np.asarray(value).tolist())
    if isinstance(value, (list, tuple)):
        return ("i" if all(isinstance(v, int) for v in value) else "?", list(value))
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, float):
        return ("f", value)
    return value


def same(a, b):
    """Equal rows: the same columns in the same order, equal values (dtype kinds too, where
    `hf[i]` gives numpy; a typed read gives numpy where hf's Python format gives lists)."""
    assert list(a) == list(b), (list(a), list(b))
    for key in a:
        x, y = plain(a[key]), plain(b[key])
        if isinstance(x, tuple) and isinstance(y, tuple):
            assert x[1] == y[1], (key, x, y)
            if isinstance(b[key], (np.ndarray, np.generic)):
                assert x[0] == y[0], (key, x, y)  # numpy from hf: the same dtype kind
        else:
            assert x == y, (key, x, y)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_rows_are_what_hf_i_gives(name):
    hf = FORMATS[name](build())
    source = tpufeed.Dataset.from_huggingface(hf).source
    for i in range(N):
        same(source[i], hf[i])
    rows = list(tpufeed.Dataset.from_huggingface(hf))
    for i, row in enumerate(rows):
        same(row, hf[i])


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["columns", "numpy dtype", "with_transform", "set_transform"])
def test_shuffled_rows_in_workers_are_hf_rows(name):
    hf = FORMATS[name](build())
    ds = tpufeed.Dataset.from_huggingface(hf).shuffle(2).map(lambda e: {"row": e}).workers(2)
    order = [i for b in tpufeed.Dataset.from_sequence(list(range(N))).shuffle(2) for i in [b]]
    got = [item["row"] for item in ds]
    assert len(got) == N
    for i, row in zip(order, got):
        same(row, hf[i])


def test_columns_pick_among_what_hf_i_shows():
    hf = build().with_format(columns=["text", "id"])
    ds = tpufeed.Dataset.from_huggingface(hf, columns=["id"])
    assert list(ds) == [{"id": np.int64(i)} for i in range(N)]
    with pytest.raises(InvalidArgumentError, match=r"no column 'score' \(the format shows only"):
        tpufeed.Dataset.from_huggingface(hf, columns=["score"])
    transformed = tpufeed.Dataset.from_huggingface(build().with_transform(lengths), ["length"])
    assert [e["length"] for e in transformed] == [len(f"doc {i}") for i in range(N)]
    with pytest.raises(InvalidArgumentError, match=r"transform \(with_transform\(.*lengths\)\)"):
        tpufeed.Dataset.from_huggingface(build().with_transform(lengths), ["text"]).source[0]


@pytest.mark.parametrize(
    "kind,adapter",
    [("torch", "to_torch"), ("tensorflow", "to_tf"), ("jax", "to_jax")],
)
def test_framework_formats_are_refused_naming_the_adapter(kind, adapter):
    pytest.importorskip({"tensorflow": "tensorflow"}.get(kind, kind))
    hf = build().with_format(kind, columns=["id", "tokens"])
    with pytest.raises(InvalidArgumentError) as refused:
        tpufeed.Dataset.from_huggingface(hf)
    message = str(refused.value)
    assert f"formatted as {kind!r} (with_format({kind!r}, columns=['id', 'tokens']))" in message
    assert (
        f"ds.{adapter}()" in message and "hf.with_format(None, columns=['id', 'tokens'])" in message
    )


@pytest.mark.parametrize("kind", ["arrow", "pandas"])
def test_table_formats_are_refused(kind):
    with pytest.raises(
        InvalidArgumentError, match=rf"formatted as '{kind}'.*one-row.*with_format\(None\)"
    ):
        tpufeed.Dataset.from_huggingface(build().with_format(kind))


def test_a_transform_is_part_of_the_fingerprint_and_a_typed_read_keeps_its_own():
    plain_fp = tpufeed.Dataset.from_huggingface(build()).fingerprint()
    assert tpufeed.Dataset.from_huggingface(build().with_format("numpy")).fingerprint() == plain_fp
    with_lengths = tpufeed.Dataset.from_huggingface(build().with_transform(lengths))
    with_doubled = tpufeed.Dataset.from_huggingface(build().with_transform(doubled))
    assert len({plain_fp, with_lengths.fingerprint(), with_doubled.fingerprint()}) == 3
