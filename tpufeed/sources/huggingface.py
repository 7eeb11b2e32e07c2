"""A Hugging Face `datasets.Dataset` as a source: the rows `hf[i]` gives, as its format says.

`Dataset.from_source(hf_dataset)` works as it is (a `datasets.Dataset` has `__len__`,
`__getitem__` and a batched `__getitems__`, which tpufeed uses), and yields whatever the
dataset's format gives: Python lists and ints by default; with `with_format("numpy")`, arrays,
but an integer column holding nulls turns into float NaN in batched reads and stays int in
single ones. `HuggingFaceSource` reads the rows as Arrow instead (one batched take per read)
and converts them like Parquet rows (`tpufeed.sources._arrow_rows`): numpy scalars and arrays,
`str`, None for null, the same types whatever the batch.

The dataset's format is honoured, never dropped (`tpufeed.sources.huggingface_format`): its
`columns` (and `output_all_columns`) decide the columns; a transform (`with_transform`,
`set_transform`) is applied as `hf[indices]` applies it, by reading through the dataset
itself; formats whose rows cannot be batched ("torch", "arrow", ...) are refused, naming the
call to make instead.

Nothing is downloaded: the dataset is what the caller built or loaded. Workers get it pickled:
a dataset backed by Arrow files on disk (what `load_dataset` and `load_from_disk` give) travels
as their paths and is memory-mapped again; one built in memory (`from_dict`) travels whole.

>>> import datasets  # doctest: +SKIP
>>> hf = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1]})  # doctest: +SKIP
>>> HuggingFaceSource(hf)[1]  # doctest: +SKIP
{'text': 'b', 'label': np.int64(1)}
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError, missing_dependency
from tpufeed.ops.function_identity import function_identity
from tpufeed.sources.huggingface_format import plan_of
from tpufeed.sources.parquet.source import check_columns
from tpufeed.sources.sharded import checked_indices
from tpufeed.storage.opener import FileIdentity

try:
    from tpufeed.sources._arrow_rows import rows_of
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_dependency("pyarrow", "huggingface") from error

__all__ = ["HuggingFaceSource"]


class HuggingFaceSource:
    """Rows of a `datasets.Dataset` (its `columns`, default all) as dicts of numpy values."""

    def __init__(self, dataset: Any, columns: Sequence[str] | None = None):
        kind = type(dataset).__name__
        if kind in ("DatasetDict", "IterableDatasetDict"):
            raise InvalidArgumentError(
                f"from_huggingface needs one split, got a {kind} of "
                f"{sorted(dataset)}: pass ds['train'], for instance"
            )
        if kind == "IterableDataset" or not hasattr(dataset, "with_format"):
            raise InvalidArgumentError(
                f"HuggingFaceSource needs a datasets.Dataset (random access), got {kind}; "
                "Dataset.from_huggingface reads a streaming dataset's Parquet files in place"
            )
        self._plan = plan_of(dataset, check_columns(columns))
        self.columns: list[str] | None = self._plan.columns
        if self._plan.own:  # a transform, or format settings: the dataset makes the rows
            self._dataset = dataset
        else:
            self._dataset = dataset.select_columns(self.columns).with_format("arrow")

    def __len__(self) -> int:
        return len(self._dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        n = len(self)
        keys = checked_indices(
            indices, n, lambda bad: f"record index {bad} is out of range for a dataset of {n} rows"
        )
        if not keys.size:
            return []
        if not self._plan.own:
            return rows_of(self._dataset[keys.tolist()], self.columns)
        rows: list[dict[str, Any]] = self._dataset.__getitems__(keys.tolist())
        return rows if self.columns is None else [self._picked(row) for row in rows]

    def fingerprint(self) -> str:
        # Not datasets' own fingerprint: it is random for transforms it cannot hash, which
        # would refuse every state after a restart. A typed read's rows are its features'.
        made_by = f":{self._plan.described}" if self._plan.own else ""
        return f"HuggingFaceSource[{self._dataset.features}:{len(self)}{made_by}]"

    def content_identity(self) -> bytes:
        """What the rows are made of, for `cache()`'s key: the Arrow files under the dataset
        (each one's whole identity: a file replaced is other data) or its in-memory data, the
        rows it selects, and the format or transform that makes them (the transform's code
        and what it reads, as `cache()` keys its own stages)."""
        digest = hashlib.blake2b(self.fingerprint().encode(), digest_size=32)
        data = self._dataset.with_format(None)  # the transform is keyed by its code, below
        try:
            digest.update(pickle.dumps(data, protocol=5))  # memory-mapped: paths; else data
        except Exception as error:  # noqa: BLE001 - whatever pickling raises
            raise InvalidArgumentError(
                f"cache() cannot key the Hugging Face dataset's data: it does not pickle "
                f"({type(error).__name__}: {error}); pass cache(..., key='...')"
            ) from None
        for entry in self._dataset.cache_files:
            name = entry["filename"]
            digest.update(f"{name}\0{FileIdentity.of(os.stat(name)).key()}".encode())
        transform = (self._dataset.format.get("format_kwargs") or {}).get("transform")
        if transform is not None:
            digest.update(function_identity(transform, "the Hugging Face dataset's transform"))
        return digest.digest()

    def _picked(self, row: dict[str, Any]) -> dict[str, Any]:
        """`row`'s columns `self.columns` (a transform's row: the names checked here)."""
        assert self.columns is not None
        missing = [name for name in self.columns if name not in row]
        if missing:
            raise InvalidArgumentError(
                f"the dataset's transform ({self._plan.described}) gives no column "
                f"{', '.join(map(repr, missing))}; its rows have {list(row)}"
            )
        return {name: row[name] for name in self.columns}

    def __repr__(self) -> str:
        return f"HuggingFaceSource({len(self)} rows, columns={self.columns})"
