"""The offline Beam stage: `WriteShards` and the `tpufeed build` pipeline.

Apache Beam is imported on first use of a name that needs it (`pip install tpufeed[beam]`);
`tpufeed.beam.ranking` and `tpufeed.beam.schema` are pure Python.

>>> import apache_beam as beam, tpufeed.beam  # doctest: +SKIP
>>> with beam.Pipeline(runner=tpufeed.beam.in_process_runner()) as p:  # doctest: +SKIP
...     p | beam.Create(records) | tpufeed.beam.WriteShards("/data/ds", num_shards=8)
"""

from __future__ import annotations

import importlib
from typing import Any

from tpufeed.errors import missing_dependency

__all__ = ["BuildConfig", "WriteShards", "build", "in_process_runner"]

_LAZY = {"WriteShards": "tpufeed.beam.write_shards", "BuildConfig": "tpufeed.beam.build_pipeline",
         "build": "tpufeed.beam.build_pipeline", "in_process_runner": "tpufeed.beam.build_pipeline"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpufeed.beam' has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "apache_beam":
            raise missing_dependency("apache_beam", "beam") from e
        raise
