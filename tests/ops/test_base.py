"""What stages and executors share: the per-stage clock that workers ship to the parent."""

from tpufeed.ops.base import StageClock


def test_clock_drain_and_merge():
    clock = StageClock()
    clock.add("read", 1.5, 10)
    shipped = clock.drain()
    assert shipped == {"read": (1.5, 10)} and not clock.seconds
    other = StageClock()
    other.merge(shipped)
    other.merge(shipped)
    assert other.seconds["read"] == 3.0 and other.records["read"] == 20
