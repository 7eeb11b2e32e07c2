"""Importing a module of tpufeed.beam that imports Apache Beam: without the one line Beam
logs about its BigQuery client, and with the install command where Beam is missing.

>>> run_build = import_with_beam("tpufeed.beam.build_pipeline").run_build  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from types import ModuleType

from tpufeed.errors import missing_dependency

__all__ = ["import_with_beam"]


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


def import_with_beam(module: str) -> ModuleType:
    """`module`, imported quietly; MissingDependencyError (`pip install tpufeed[beam]`) where
    Beam is not installed."""
    try:
        with _without_apitools_warning():
            return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "apache_beam":
            raise missing_dependency("apache_beam", "beam") from e
        raise
