"""Process-wide counts: a run's share by difference, a worker's increments shipped once."""

from __future__ import annotations

import threading

from tpufeed.observe import counts


def test_since_is_what_was_counted_after_the_snapshot():
    before = counts.snapshot()
    counts.count("cache_hits")
    counts.count("gcs_bytes", 1000)
    after = counts.since(before)
    assert after["cache_hits"] == 1 and after["gcs_bytes"] == 1000
    assert after["cache_misses"] == 0
    assert set(counts.NAMES) <= set(after)


def test_a_drain_ships_each_increment_once():
    counts.drain()
    counts.count("bytes_read", 7)
    counts.count("bytes_read", 3)
    assert counts.drain() == {"bytes_read": 10}
    assert counts.drain() == {}


def test_added_increments_count_here_but_are_not_shipped_again():
    counts.drain()
    before = counts.snapshot()
    counts.add({"gcs_retries": 2})
    assert counts.since(before)["gcs_retries"] == 2
    assert counts.drain() == {}


def test_a_forked_worker_forgets_what_its_parent_had_not_shipped():
    counts.count("cache_evictions")
    counts.forget_inherited()
    assert counts.drain() == {}


def test_threads_counting_at_once_lose_nothing():
    before = counts.snapshot()

    def hit() -> None:
        for _ in range(10_000):
            counts.count("cache_hits")

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts.since(before)["cache_hits"] == 40_000
