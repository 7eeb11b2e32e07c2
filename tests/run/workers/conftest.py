"""What the worker tests share: a check that a test left no worker and no shared memory."""

import gc
import time

import pytest

from tests.processes import leftovers


@pytest.fixture
def nothing_left_behind():
    """After the test: no tpufeed worker of this process alive, no segment of it in /dev/shm
    (waiting up to 5 s for workers that are on their way out)."""
    yield
    gc.collect()
    deadline = time.monotonic() + 5
    while leftovers() != ([], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers() == ([], [])
