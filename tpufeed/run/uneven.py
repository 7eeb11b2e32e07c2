"""Deprecated: moved to `tpufeed.run.hosts.uneven`, where its names are the same. Importing
this module warns (`DeprecationWarning`); it goes in a later minor release (docs/versioning.md)."""

import warnings

from tpufeed.run.hosts.uneven import (
    LOOKAHEAD,
    MASK,
    UNEVEN,
)

__all__ = ["LOOKAHEAD", "MASK", "UNEVEN"]

warnings.warn(
    "tpufeed.run.uneven moved to tpufeed.run.hosts.uneven: import its names from there",
    DeprecationWarning,
    stacklevel=2,
)
