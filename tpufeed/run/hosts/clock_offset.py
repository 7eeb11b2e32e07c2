"""Each host's trace clock against process 0's, measured through the store the hosts share, so
that `tpufeed trace merge` puts every host's timeline on one clock and says how close it is.

Why round trips through keys: the hosts share no clock, and the store (jax.distributed's
coordination service, torch.distributed's store) stamps nothing. A barrier's release reaches
each host after a delay it cannot know, so it leaves the error unbounded; a round trip bounds
it. Host k reads its clock (`a`), sets a key asking process 0 the time, and waits for the
answer; process 0, waiting on that key, reads its own clock (`b`) as it sees the ask and sets
the answer; host k reads its clock again when the answer arrives (`d`). Process 0 read `b`
after the ask was set and before the answer came back, so at that moment host k's clock read
between `a` and `d`: the offset (host k's clock minus process 0's) lies in `[a - b, d - b]`.
It is taken as the middle, `(a + d) / 2 - b`, within half the round trip, `(d - a) / 2`: a
bound, not an estimate, whatever the two legs' delays. Of `ROUNDS` round trips the shortest
is kept (the store's queueing only ever lengthens one).

The clocks measured are those the events are stamped with (`perf_counter_ns`, CLOCK_MONOTONIC):
a wall-clock step between the measurement and the events (an NTP correction) moves nothing.
The offset is measured once, when the first iterator of a recording starts; after that, two
hosts' clocks drift apart by their frequency difference (NTP keeps it to a few microseconds a
second at most), which the bound does not include.

It all runs on daemon threads, so the training step waits for none of it: process 0 answers
each other host on a thread of its own (a host that never asks costs its thread a wait of
`CONTACT_S`); the others ask on one thread each. Every wait is bounded: `CONTACT_S` for the
first answer (the hosts start their recordings at different moments), `ROUND_S` for each one
after it. A host whose process 0 does not answer, or whose store fails, warns and records no
offset: its file is then aligned by wall clock only. A wait is made of calls of at most
`SLICE_S`, and the process's exit stops the threads and waits for their call in flight (at
most `SLICE_S` and a round trip; `tpufeed.run.hosts.exit_safe`): a thread still inside the
store's native client when Python finalises would abort the process.
"""

from __future__ import annotations

import itertools
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from tpufeed.observe import pod_clock
from tpufeed.observe.pod_clock import PodClock
from tpufeed.order.processes import initialised_runtime
from tpufeed.run.hosts.exit_safe import Exiting, exiting, guarded, start
from tpufeed.run.hosts.key_value_agreement import NOT_YET
from tpufeed.run.hosts.torch_store import StoreClient

__all__ = [
    "CONTACT_S",
    "ROUNDS",
    "ROUND_S",
    "SLICE_S",
    "StoreKeys",
    "measure",
    "measure_in_background",
]

ROUNDS = 8  # round trips per host: the shortest is kept
CONTACT_S = 60.0  # the longest wait for the first answer (or, on process 0, the first ask)
ROUND_S = 2.0  # the longest wait for each answer (or ask) after the first
SLICE_S = 0.5  # the longest one call of a wait: the exit waits for no longer call

_MEASUREMENTS = itertools.count()  # one key prefix per measurement, the same on every host
Clock = Callable[[], int]


def _trace_clock() -> int:
    return time.perf_counter_ns()  # looked up at each call: the clock the timeline stamps with


def _wall_clock() -> int:
    return time.time_ns()


class StoreKeys:
    """The three calls a measurement makes, over jax.distributed's client or a torch store:
    `set`, `get` (None when `timeout_s` passes first) and `delete`."""

    def __init__(self, client: Any, service: str, torch_store: Any = None):
        self._owner = client if torch_store is None else torch_store
        self.service = service
        # guarded: a call on a daemon thread never aborts the process's exit
        self._client = guarded(client)
        self._store = None if torch_store is None else guarded(torch_store)

    @property
    def owner(self) -> object:
        """What the keys live in: one measurement per store (a new run in this process, a new
        one)."""
        return self._owner

    @classmethod
    def of_torch(cls, store: Any, service: str) -> StoreKeys:
        return cls(StoreClient(store, 1), service, store)

    def set(self, key: str, value: str) -> None:
        self._client.key_value_set(key, value)

    def get(self, key: str, timeout_s: float) -> str | None:
        """The key's value once set; None after `timeout_s`; `Exiting` once the process
        exits, or a trace file was written without the measurement (checked between calls of
        at most `SLICE_S`)."""
        deadline = time.monotonic() + timeout_s
        while not exiting() and not pod_clock.given_up():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait_ms = max(1, int(min(left, SLICE_S) * 1000))
            try:
                return str(self._client.blocking_key_value_get(key, wait_ms))
            except Exception as exc:  # each runtime raises its own error types
                if not str(exc).startswith(NOT_YET):
                    raise
        if exiting():
            raise Exiting("this process exited first")
        raise Exiting("the trace file was written without it first")

    def delete(self, key: str) -> None:
        if self._store is not None:
            self._store.delete_key(key)
        else:
            self._client.key_value_delete(key)


def measure_in_background() -> None:
    """Starts measuring this host's offset to process 0 on a thread, once per run (its store),
    where several hosts run under jax.distributed or torch.distributed; otherwise nothing."""
    runtime = initialised_runtime()
    if runtime is None:
        return
    keys, host, hosts = _store_of(runtime)
    if hosts < 2 or not pod_clock.begin(keys.owner):
        return
    prefix = f"tpufeed/clock/{next(_MEASUREMENTS)}/"
    start(_measure_and_settle, (keys, prefix, host, hosts), "tpufeed-clock-offset")


def _measure_and_settle(keys: StoreKeys, prefix: str, host: int, hosts: int) -> None:
    try:
        clock = measure(keys, prefix, host, hosts)
    except Exception as exc:  # noqa: BLE001 - a failed measurement is a note, never a crash
        clock = PodClock(host, hosts, note=f"{keys.service} failed: {_first_line(exc)}")
    if clock.offset_ns is None and not exiting() and not pod_clock.given_up():
        warnings.warn(
            f"host {host}: the clock offset to process 0 was not measured ({clock.note}); this "
            "host's trace file is aligned by wall clock only in `tpufeed trace merge`",
            stacklevel=1,
        )
    pod_clock.settle(clock)


def _store_of(runtime: str) -> tuple[StoreKeys, int, int]:
    """The store of the run, this host's index and the number of hosts."""
    if runtime == "jax":
        import jax
        from jax._src.distributed import global_state

        service = "jax.distributed's coordination service (run by process 0)"
        return StoreKeys(global_state.client, service), jax.process_index(), jax.process_count()
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_store

    service = "torch.distributed's store (served by rank 0, or by torchrun's agent)"
    keys = StoreKeys.of_torch(_get_default_store(), service)
    return keys, dist.get_rank(), dist.get_world_size()


def measure(
    keys: StoreKeys,
    prefix: str,
    host: int,
    hosts: int,
    clock: Clock = _trace_clock,
    wall: Clock = _wall_clock,
    contact_s: float = CONTACT_S,
) -> PodClock:
    """This host's place on process 0's clock: process 0 answers every other host (on threads,
    returning at once) and is the reference; another host asks process 0 `ROUNDS` times."""
    if host == 0:
        token = uuid.uuid4().hex[:16]
        for peer in range(1, hosts):
            args = (keys, prefix, peer, token, clock, wall, contact_s)
            start(_answer, args, f"tpufeed-clock-answer-{peer}")
        now = clock()
        reference = wall() - now
        return PodClock(0, hosts, 0, 0, reference, token, keys.service, ROUNDS, None, now)
    return _ask(keys, prefix, host, hosts, clock, contact_s)


def _answer(
    keys: StoreKeys, prefix: str, peer: int, token: str, clock: Clock, wall: Clock, wait_s: float
) -> None:
    """Process 0's side for host `peer`: each ask answered with the time it was seen."""
    try:
        for round_ in range(ROUNDS):
            if keys.get(f"{prefix}ask/{peer}/{round_}", wait_s) is None:
                return  # the host never asked (it records no timeline) or is gone
            seen = clock()
            keys.set(f"{prefix}answer/{peer}/{round_}", f"{seen},{wall() - seen},{token}")
            wait_s = ROUND_S
    except Exception:  # noqa: BLE001 - the asking host notes what it misses
        pass


def _ask(
    keys: StoreKeys, prefix: str, host: int, hosts: int, clock: Clock, wait_s: float
) -> PodClock:
    """Host `host`'s round trips; the offset of the shortest."""
    best: tuple[int, int, int, str, int] | None = None  # trip, offset, reference, token, when
    rounds, note = 0, None
    try:
        for round_ in range(ROUNDS):
            asked = clock()
            keys.set(f"{prefix}ask/{host}/{round_}", str(asked))
            answer = keys.get(f"{prefix}answer/{host}/{round_}", wait_s)
            came = clock()
            if answer is None:
                note = f"process 0 did not answer within {wait_s:g} s"
                break
            rounds += 1
            seen, reference, token = _parse(answer)
            trip, offset = came - asked, (asked + came) // 2 - seen
            if best is None or trip < best[0]:
                best = (trip, offset, reference, token, (asked + came) // 2)
            wait_s = ROUND_S
    except Exiting as stopped:
        note = str(stopped)
    except Exception as exc:  # noqa: BLE001 - the store failed: process 0 gone, network cut
        note = f"{keys.service} failed: {_first_line(exc)}"
    finally:
        if not exiting():  # at exit the keys go with the store
            _clean(keys, prefix, host, rounds + 1)
    if best is None:
        return PodClock(host, hosts, service=keys.service, note=note)
    trip, offset, reference, token, when = best
    partial = None if rounds == ROUNDS else f"{rounds} of {ROUNDS} round trips: {note}"
    error = (trip + 1) // 2
    service = keys.service
    return PodClock(host, hosts, offset, error, reference, token, service, rounds, partial, when)


def _parse(answer: str) -> tuple[int, int, str]:
    seen, reference, token = answer.split(",")
    return int(seen), int(reference), token


def _clean(keys: StoreKeys, prefix: str, host: int, rounds: int) -> None:
    """Removes this host's keys (a store that is gone keeps them: nothing to do then)."""
    try:
        for round_ in range(min(rounds, ROUNDS)):
            keys.delete(f"{prefix}ask/{host}/{round_}")
            keys.delete(f"{prefix}answer/{host}/{round_}")
    except Exception:  # noqa: BLE001 - best effort: the keys die with the store
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
