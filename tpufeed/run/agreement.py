"""Deprecated: moved to `tpufeed.run.hosts.agreement`, where its names are the same. Importing
this module warns (`DeprecationWarning`); it goes in a later minor release (docs/versioning.md)."""

import warnings

from tpufeed.run.hosts.agreement import (
    HostAgreement,
    JaxAgreement,
    ThreadAgreement,
    TorchAgreement,
    default_agreement,
)

__all__ = [
    "HostAgreement",
    "JaxAgreement",
    "ThreadAgreement",
    "TorchAgreement",
    "default_agreement",
]

warnings.warn(
    "tpufeed.run.agreement moved to tpufeed.run.hosts.agreement: import its names from there",
    DeprecationWarning,
    stacklevel=2,
)
