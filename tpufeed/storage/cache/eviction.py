"""Which cached shards to evict: furthest next use by the published plans, else least recent.

A victim chooser gets (key, size, last read) of every evictable file and the bytes to free, and
returns keys, most evictable first, leaving out what it would rather wait for. "Last read" is
inf for a file not read since it was downloaded (fetched ahead, so needed soon).

The read-ahead of a pipeline knows the plan; it publishes every shard's distance to its next
use under `plans/`, so that a reader in another process (a worker) that must make room itself
evicts by the same rule: shards no plan needs first, then the one needed furthest in future.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable

from tpufeed.storage.cache.layout import CacheLayout, read_json, remove, write_json
from tpufeed.storage.derived import remove_dead_temporaries_once

__all__ = ["PlanBoard", "VictimChooser", "least_recently_used"]

VictimChooser = Callable[[list[tuple[str, int, float]], int], list[str]]


def least_recently_used(entries: list[tuple[str, int, float]], need: int) -> list[str]:
    return [key for key, _, _ in sorted(entries, key=lambda e: e[2])]


class PlanBoard:
    """The `plans/` folder of one cache: read-aheads post their plans, readers consult them."""

    _serial = 0
    _serial_lock = threading.Lock()

    def __init__(self, layout: CacheLayout):
        self.layout = layout

    def post(self, name: str, distances: dict[str, float]) -> None:
        """Publishes one read-ahead's plan: key -> plan positions until its next use."""
        with contextlib.suppress(OSError):  # a hint for others: losing one costs no correctness
            self.layout.make_dirs()
            remove_dead_temporaries_once(self.layout.plans)  # plans killed writers left
            write_json(
                os.path.join(self.layout.plans, name + ".json"),
                {"pid": os.getpid(), "posted": time.time(), "next": distances},
            )

    def withdraw(self, name: str) -> None:
        remove(os.path.join(self.layout.plans, name + ".json"))

    @classmethod
    def new_name(cls) -> str:
        with cls._serial_lock:
            cls._serial += 1
            return f"{os.getpid()}-{cls._serial}"

    def distances(self) -> list[tuple[float, dict[str, float]]]:
        """(time posted, distances) of live processes' plans (those of dead ones are removed)."""
        try:
            names = os.listdir(self.layout.plans)
        except FileNotFoundError:
            return []
        plans = []
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(self.layout.plans, name)
            record = read_json(path)
            if record is None or not _alive(record.get("pid")):
                remove(path)
                continue
            if isinstance(record.get("next"), dict) and isinstance(record.get("posted"), float):
                plans.append((record["posted"], record["next"]))
        return plans

    def chooser(self) -> VictimChooser:
        """Evicts what no plan needs (least recently read first), then furthest next use.

        A shard read since a plan was posted is in use by that plan (distance 0), whatever the
        distance the plan gave it: plans are re-posted only every few tens of milliseconds.
        """

        def choose(entries: list[tuple[str, int, float]], need: int) -> list[str]:
            plans = self.distances()

            def rank(entry: tuple[str, int, float]) -> tuple[float, float]:
                key, _, last_read = entry
                distance = min(
                    (
                        0.0 if last_read != math.inf and last_read > posted else p[key]
                        for posted, p in plans
                        if key in p
                    ),
                    default=math.inf,
                )
                return -distance, last_read

            return [key for key, _, _ in sorted(entries, key=rank)]

        return choose


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
