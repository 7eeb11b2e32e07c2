"""`Dataset.mix(..., epochs=[...])`: a mixture's weights stated in epochs of each component.

A component's weight is its records per epoch times its epochs, so that over one pass of the
mixture each component is read that many times: `epochs=[1, 2]` over components of 1,000 and
500 records draws 1,000 of each (weights 0.5 and 0.5). The records per epoch are the
component's own count (`len()` of one epoch of it: a built dataset's from its manifest, after
any slice); a component whose count depends on its data (filter, flat_map, ignore_errors)
is refused, naming it: give `weights=` there.

>>> from tpufeed import Dataset
>>> epoch_weights([Dataset.from_sequence(range(1000)), Dataset.from_sequence(range(500))], [1, 2])
[1000.0, 1000.0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError, UnknownLengthError

__all__ = ["epoch_weights"]


def epoch_weights(datasets: Sequence[Any], epochs: Any) -> list[float]:
    """Weights for `datasets` (each a `Dataset` of one component) that read component i
    `epochs[i]` times in one pass of the mixture; raises naming the bad value."""
    if not isinstance(epochs, (list, tuple)) or len(epochs) != len(datasets):
        raise InvalidArgumentError(
            f"mix needs one epochs count per dataset ({len(datasets)}), got {epochs!r}"
        )
    for e in epochs:
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not np.isfinite(e) or e <= 0:
            raise InvalidArgumentError(f"mix epochs must be positive numbers, got {epochs!r}")
    weights = []
    for i, (ds, e) in enumerate(zip(datasets, epochs)):
        try:
            count = len(dataclasses.replace(ds, _epochs=1))
        except UnknownLengthError as error:
            raise InvalidArgumentError(
                f"mix(epochs=...) weighs each component by its records per epoch, and "
                f"component {i}'s is not known before reading it ({error}); give weights= "
                "instead"
            ) from error
        if not count:
            raise InvalidArgumentError(
                f"mix(epochs=...): component {i} has no records, so no epochs of it to weigh"
            )
        weights.append(float(count * e))
    return weights
