"""The offline Beam stage: `WriteShards` and the `tpufeed build` pipeline.

Apache Beam is imported on first use of a name that needs it (`pip install tpufeed[beam]`);
`tpufeed.beam.ranking` and `tpufeed.beam.schema` are pure Python.

>>> import apache_beam as beam, tpufeed.beam  # doctest: +SKIP
>>> with beam.Pipeline(runner=tpufeed.beam.in_process_runner()) as p:  # doctest: +SKIP
...     p | beam.Create(records) | tpufeed.beam.WriteShards("/data/ds", num_shards=8)
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from typing import Any

from tpufeed.errors import missing_dependency

__all__ = [
    "BuildConfig",
    "WriteShards",
    "beam_option_names",
    "build",
    "in_process_runner",
    "unknown_beam_args",
]

_LAZY = {
    "WriteShards": "tpufeed.beam.write_shards",
    "BuildConfig": "tpufeed.beam.build_pipeline",
    "build": "tpufeed.beam.build_pipeline",
    "in_process_runner": "tpufeed.beam.build_runner",
    "beam_option_names": "tpufeed.beam.pipeline_args",
    "unknown_beam_args": "tpufeed.beam.pipeline_args",
}


class _DropApitoolsWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


@contextlib.contextmanager
def _without_apitools_warning() -> Iterator[None]:
    """Importing Beam logs "apitools not found" (its BigQuery client) on the root logger, and
    with no handler there configures logging to print it: drop that one line, configure
    nothing. tpufeed never uses BigQuery."""
    root = logging.getLogger()
    drop, placeholder = _DropApitoolsWarning(), logging.NullHandler()
    root.addFilter(drop)
    root.addHandler(placeholder)  # so that logging.warning() does not call basicConfig()
    try:
        yield
    finally:
        root.removeHandler(placeholder)
        root.removeFilter(drop)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpufeed.beam' has no attribute {name!r}")
    try:
        with _without_apitools_warning():
            return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "apache_beam":
            raise missing_dependency("apache_beam", "beam") from e
        raise
