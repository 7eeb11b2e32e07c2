"""The shared-memory budget: how much of /dev/shm one iterator's batch slots may hold at once.

By default half of the space free in /dev/shm when the iterator starts;
`options(shm_budget_bytes=...)` sets it. The budget is split evenly between the workers, and
each keeps the segments of its slots within its share (`WorkerSlots`): a batch larger than a
share raises at once, naming its size, the budget and the option; a batch that fits the share
but not beside the worker's other batches waits (the worker first gives back its idle
segments, then makes the segment without its headroom if that fits) until the consumer has
taken enough of them; where only batches lent to the consumer hold the room, and the consumer
waits for that very batch, the worker writes it into ordinary memory and sends it through the
pipe (`messages.Cramped`, `messages.Spill`). A segment counts from the moment its
worker creates it until the parent has unmapped it too (`Released`), so the budget holds for
what is really in /dev/shm, not for what one side believes.
"""

from __future__ import annotations

import os

from tpufeed.errors import WorkerError
from tpufeed.run.resources import SHM_DIR

DEFAULT_FRACTION = 0.5  # of the space free in SHM_DIR when the iterator starts


def shm_free_bytes() -> int:
    """Bytes free for new files in SHM_DIR."""
    stats = os.statvfs(SHM_DIR)
    return stats.f_bavail * stats.f_frsize


def shm_budget(chosen: int | None) -> int:
    """The budget of an iterator starting now: `chosen`, or the default."""
    return chosen if chosen is not None else int(shm_free_bytes() * DEFAULT_FRACTION)


def worker_share(budget: int, workers: int) -> int:
    return budget // max(1, workers)


def batch_too_big(nbytes: int, budget: int, workers: int) -> WorkerError:
    """The error for one batch that cannot fit in a worker's share of `budget`."""
    share = worker_share(budget, workers)
    return WorkerError(
        f"a batch of {nbytes:,} bytes does not fit in one worker's share of the shared-memory "
        f"budget: {budget:,} bytes over {workers} worker(s) is {share:,} bytes each. Raise it "
        f"with Dataset.options(shm_budget_bytes=...) to at least {nbytes * workers:,} (the "
        f"default is half of the space free in {SHM_DIR} when the iterator starts: give it "
        "more room, Docker: --shm-size=8g), or use fewer workers or smaller batches."
    )
