"""How the hosts of a run agree at a step: a small collective every host calls at once.

`tpufeed.run.uneven` ends every host's epoch at the same step by asking, through a
`HostAgreement`, how many hosts still have a batch for it. Any object with `count(flags)` is
one; tpufeed gives `JaxAgreement` (the coordination service of `jax.distributed`, the default)
and `ThreadAgreement` (hosts that are threads of one process: tests and simulations).

>>> a, b = ThreadAgreement.group(2)   # doctest: +SKIP
>>> # in thread 0: a.count((True, False)); in thread 1: b.count((True, True)) -> both (2, 1)
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Protocol

from tpufeed.errors import InvalidArgumentError, TpufeedError

__all__ = ["HostAgreement", "JaxAgreement", "ThreadAgreement"]


class HostAgreement(Protocol):
    """A small collective over the hosts of a run: every host calls `count` at the same step."""

    def count(self, flags: tuple[bool, ...]) -> tuple[int, ...]:
        """For each position of `flags`, how many hosts passed True there."""
        ...


class ThreadAgreement:
    """`HostAgreement` for hosts that are threads of one process (tests, simulations):
    `ThreadAgreement.group(3)` gives one agreement per thread."""

    def __init__(self, barrier: threading.Barrier, totals: list[Any], lock: threading.Lock):
        self._barrier, self._totals, self._lock = barrier, totals, lock

    @classmethod
    def group(cls, hosts: int, timeout_s: float = 60.0) -> list[ThreadAgreement]:
        totals: list[Any] = [None, None]  # the round being counted, and the finished one

        def publish() -> None:  # run by one thread when all have added
            totals[1], totals[0] = totals[0], None

        barrier = threading.Barrier(hosts, action=publish, timeout=timeout_s)
        lock = threading.Lock()
        return [cls(barrier, totals, lock) for _ in range(hosts)]

    def count(self, flags: tuple[bool, ...]) -> tuple[int, ...]:
        with self._lock:
            running = self._totals[0] or (0,) * len(flags)
            self._totals[0] = tuple(t + bool(f) for t, f in zip(running, flags))
        try:
            self._barrier.wait()
            total = self._totals[1]
            self._barrier.wait()  # nobody adds to the next round before all have read this one
        except threading.BrokenBarrierError:
            raise TpufeedError("host agreement: another host stopped iterating") from None
        return total


_JAX_AGREEMENTS = itertools.count()
_COUNTER_BITS = 31  # the coordination service's counters hold 32-bit signed ints


class JaxAgreement:
    """`HostAgreement` through the coordination service of `jax.distributed`: per step, one
    atomic increment and one read (no device collective, so it never waits on the device
    queue). Every process must build its iterators in the same order (as SPMD programs do)."""

    def __init__(self, name: str, hosts: int, timeout_s: float = 600.0):
        try:
            import jax
            from jax._src.distributed import global_state

            client = global_state.client
        except ImportError:
            client = None
        if client is None:
            raise InvalidArgumentError(
                f"the {hosts} hosts of this run make different numbers of batches and must agree "
                "at each step: call jax.distributed.initialize() first, or pass "
                "agreement= (a tpufeed.run.agreement.HostAgreement)"
            )
        if jax.process_count() != hosts:
            raise InvalidArgumentError(
                f"the pipeline is sharded over {hosts} hosts but jax.distributed runs "
                f"{jax.process_count()} processes: agreeing through jax needs one host per "
                "process, or pass agreement="
            )
        self._client = client
        self._hosts, self._host = hosts, jax.process_index()
        self._bits = hosts.bit_length()  # one field holds a count of hosts
        self._prefix = f"tpufeed/{name}/{next(_JAX_AGREEMENTS)}/"
        self._timeout_ms = int(timeout_s * 1000)
        self._step = 0

    def count(self, flags: tuple[bool, ...]) -> tuple[int, ...]:
        """Fields of `bits` bits packed in counters: the first counts the hosts that arrived,
        the others the flags (as many counters as the 31-bit limit needs)."""
        fields = [1, *map(int, flags)]
        per_counter = max(1, _COUNTER_BITS // self._bits)
        key = f"{self._prefix}{self._step}"
        totals = []
        for k in range(0, len(fields), per_counter):
            packed = sum(f << (self._bits * i) for i, f in enumerate(fields[k : k + per_counter]))
            totals.append(self._client.key_value_increment(f"{key}/{k}", packed))
        mask = (1 << self._bits) - 1
        if totals[0] & mask == self._hosts:  # the last to arrive tells the others
            self._client.key_value_set(f"{key}/sum", ",".join(map(str, totals)))
        else:
            try:
                answer = self._client.blocking_key_value_get(f"{key}/sum", self._timeout_ms)
            except Exception as exc:  # noqa: BLE001 - the runtime raises its own error types
                raise TpufeedError(
                    f"host agreement at step {self._step} ({key}): no answer from every process "
                    f"within {self._timeout_ms / 1000:.0f} s; another process stopped iterating, "
                    f"died, or built its iterators in another order ({exc})"
                ) from None
            totals = [int(t) for t in answer.split(",")]
        if self._host == 0 and self._step >= 2:  # every host has read step - 2's answer
            self._client.key_value_delete(f"{self._prefix}{self._step - 2}")
        self._step += 1
        counts = [
            (totals[k // per_counter] >> (self._bits * (k % per_counter))) & mask
            for k in range(len(fields))
        ]
        return tuple(counts[1:])
