"""Which component each output of a mixture comes from: stride scheduling, a pure function.

Component i's m-th element (m = 0, 1, ...) gets the pass value `(m + phase_i) / weight_i`; the
mixture takes elements in increasing pass value (ties to the lower component). So after any N
outputs component i has delivered within 1 of `N * weight_i / sum(weights)` (active ones), and
any window of N outputs is within 2 of it; independent random draws drift by ~sqrt(N) instead.
The state is the count taken from each component; the seed only sets the phases in [0, 1).

>>> next_components([0, 0], [0.75, 0.25], phases(0, 2), [True, True], 8).tolist()
[0, 0, 0, 1, 0, 0, 0, 1]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def phases(seed: int, components: int) -> np.ndarray:
    """Each component's phase in [0, 1), fixed by the seed."""
    digest = hashlib.blake2b(f"tpufeed-mix:{seed}".encode(), digest_size=8 * components).digest()
    return np.frombuffer(digest, "<u8").astype(np.float64) / 2.0**64


def next_components(
    taken: Sequence[int],
    weights: Sequence[float],
    phase: np.ndarray,
    active: Sequence[bool],
    count: int,
) -> np.ndarray:
    """The components of the next `count` outputs, given how many each has delivered."""
    values, owners = [], []
    for i, (m, weight, live) in enumerate(zip(taken, weights, active)):
        if live:
            values.append((m + np.arange(count) + phase[i]) / weight)
            owners.append(np.full(count, i))
    if not values:
        return np.empty(0, np.int64)
    value, owner = np.concatenate(values), np.concatenate(owners)
    return owner[np.lexsort((owner, value))[:count]]
