"""First-fit packing of segments into rows: the pure core under `pack`."""

import numpy as np

from tpufeed.ops.first_fit import RowPacker, Segment, split


def test_the_packer_closes_the_fullest_row_when_none_has_room():
    packer = RowPacker([10], open_rows=2)
    add = lambda n, ref: packer.add(Segment((np.zeros(n),), ref))  # noqa: E731
    assert not add(6, "a") and not add(7, "b")
    closed = add(5, "c")  # neither has room: "b" (7 of 10) is the fullest
    assert [[s.ref for s in row.segments] for row in closed] == [["b"]]
    assert [[s.ref for s in row.segments] for row in packer.open] == [["a"], ["c"]]
    assert [len(p[0]) for p in split((np.arange(25),), [10], cut=False)] == [10, 10, 5]
