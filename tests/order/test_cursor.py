"""Cursor arithmetic: host shares of an epoch and layers of what is left, without I/O."""

import numpy as np
import pytest

from tpufeed.order.cursor import Layer, host_positions, share_size


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 100, 101])
@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
@pytest.mark.parametrize("base", [0, 3])
def test_host_shares_partition_the_rest_of_the_epoch(n, hosts, base):
    base = min(base, n)
    seen = []
    sizes = []
    for host in range(hosts):
        size = share_size(n, base, host, hosts)
        sizes.append(size)
        seen.extend(host_positions(base, host, hosts, 0, size).tolist())
    assert sorted(seen) == list(range(base, n))
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("consumed", [(0, 0, 0), (3, 1, 2), (5, 5, 4), (0, 4, 4), (4, 0, 0)])
@pytest.mark.parametrize("parent", [9, 12, 14, 15, 30])
@pytest.mark.parametrize("base", [0, 2])
def test_a_layer_lists_exactly_the_unconsumed_indices_in_order(consumed, parent, base):
    layer = Layer(base, 3, consumed)
    left = sorted(
        set(range(base, parent))
        - {p for h in range(3) for p in host_positions(base, h, 3, 0, consumed[h]).tolist()}
    )
    assert layer.size(parent) == len(left)
    assert layer.parent_indices(np.arange(len(left)), parent).tolist() == left
