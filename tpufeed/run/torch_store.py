"""Deprecated: moved to `tpufeed.run.hosts.torch_store`, where its names are the same. Importing
this module warns (`DeprecationWarning`); it goes in a later minor release (docs/versioning.md)."""

import warnings

from tpufeed.run.hosts.torch_store import (
    StoreClient,
)

__all__ = ["StoreClient"]

warnings.warn(
    "tpufeed.run.torch_store moved to tpufeed.run.hosts.torch_store: import its names from there",
    DeprecationWarning,
    stacklevel=2,
)
