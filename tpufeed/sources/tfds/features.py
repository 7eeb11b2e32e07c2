"""A TFDS dataset's records decoded with its own features, as TFDS decodes them into numpy.

`features.json` is rebuilt into TFDS's feature connectors
(`tfds.features.FeatureConnector.from_json`) in each process that decodes, on first use, and
each record goes through `deserialize_example_np`, the call `tfds.data_source` makes: no
TensorFlow. Where that call leaves a Python scalar or list (a `ClassLabel`, a `Scalar`, a
sequence), it becomes a numpy value of the feature's dtype, as `tfds.load` gives it, so a
float32 feature stays float32 in a batch and an empty sequence keeps its dtype. TFDS would import any module a `features.json` names to find its feature
classes; tpufeed imports none: every class named must already be loaded (TFDS's own are), so a
dataset with a feature class of its own asks for that module to be imported first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    MissingDependencyError,
    TpufeedError,
)

__all__ = ["ExampleDecoder"]


class ExampleDecoder:
    """Decodes serialized examples with the features `features` (features.json, parsed) of
    the dataset at `where`. Picklable: the connectors are rebuilt where they are used."""

    def __init__(self, features: dict[str, Any], where: str):
        self.features = features
        self.where = where
        self._connector: Any = None
        self._infos: Any = None  # the features' TensorInfo tree
        self._built()  # a features.json that does not build is refused at open

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_connector": None, "_infos": None}

    def decode(self, record: bytes, index: int, locate: Callable[[int], tuple[str, int]]) -> Any:
        """`record` decoded; a record that does not decode is a `CorruptDataError` naming
        where it was read (`locate(index)`: the file and the record in it)."""
        connector = self._connector or self._built()
        try:
            return _typed(connector.deserialize_example_np(record), self._infos)
        except Exception as error:  # noqa: BLE001 - any failure on outside bytes is named
            path, index = locate(index)
            raise CorruptDataError(
                f"{path} record {index}: not an example of the dataset's features "
                f"({self.where}/features.json): {type(error).__name__}: {error}",
                path=path,
                record=index,
            ) from None

    def _built(self) -> Any:
        try:
            from tensorflow_datasets.core.features import feature as feature_lib
        except ImportError as error:
            raise MissingDependencyError(
                "from_tfds decodes records with the dataset's own features: tensorflow_datasets "
                "is not installed; install it with `pip install tensorflow-datasets`"
            ) from error
        registered = feature_lib.FeatureConnector._registered_features
        unknown = sorted({name for name in _class_names(self.features) if name not in registered})
        if unknown:
            raise InvalidArgumentError(
                f"{self.where}/features.json names feature classes that are not loaded: "
                f"{', '.join(unknown)}; tpufeed imports no module a data file names: import the "
                "module that defines them first"
            )
        try:
            connector = feature_lib.FeatureConnector.from_json(self.features)
            infos = connector.get_tensor_info()
        except TpufeedError:
            raise
        except Exception as error:  # noqa: BLE001 - TFDS's own parse of outside JSON
            raise CorruptDataError(
                f"{self.where}/features.json: TFDS cannot build its features: "
                f"{type(error).__name__}: {error}",
                path=f"{self.where}/features.json",
            ) from None
        if infos == {}:  # TFDS: "No features set, cannot decode example!"
            raise CorruptDataError(
                f"{self.where}/features.json declares no features: no record can be decoded",
                path=f"{self.where}/features.json",
            )
        self._infos, self._connector = infos, connector
        return connector


def _typed(value: Any, info: Any) -> Any:
    """`value` with Python numbers and lists as numpy values of `info`'s dtype (strings,
    whose dtype is object, and what is numpy already stay as they are)."""
    if isinstance(value, dict) and isinstance(info, dict):
        return {k: _typed(v, info[k]) if k in info else v for k, v in value.items()}
    dtype = getattr(info, "np_dtype", None)
    if dtype is None or np.dtype(dtype) == object:
        return value
    if isinstance(value, (bool, int, float)):
        return np.asarray(value, dtype=dtype)[()]
    if isinstance(value, (list, tuple)):
        return np.asarray(value, dtype=dtype)
    return value


def _class_names(value: Any) -> Iterator[str]:
    """Every feature class a features.json names (`pythonClassName`, or a legacy `type`)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "pythonClassName" or (key == "type" and "content" in value):
                yield str(item)
            else:
                yield from _class_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _class_names(item)
