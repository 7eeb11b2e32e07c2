"""The mixture's schedule: which component each next item comes from, in exact proportions."""

import numpy as np
import pytest

from tpufeed.order.schedule import next_components, phases


@pytest.mark.parametrize("weights", [[0.5, 0.3, 0.2], [1, 1], [0.9, 0.05, 0.05]])
def test_every_window_is_within_two_of_its_share(weights):
    seq = next_components(
        [0] * len(weights),
        np.array(weights) / sum(weights),
        phases(1, len(weights)),
        [True] * len(weights),
        5000,
    )
    share = np.array(weights) / sum(weights)
    counts = np.cumsum(np.eye(len(weights))[seq], axis=0)
    counts = np.vstack([np.zeros(len(weights)), counts])
    for window in (1, 7, 50, 333):
        in_window = counts[window:] - counts[:-window]
        assert np.abs(in_window - window * share).max() < 2
