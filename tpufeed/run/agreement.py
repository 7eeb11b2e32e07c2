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
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from tpufeed.errors import HostLostError, InvalidArgumentError, TpufeedError
from tpufeed.ops.base import now
from tpufeed.run.heartbeat import BEAT_S, Heartbeat

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
_NOT_YET = "DEADLINE_EXCEEDED"  # how the service says a blocking read timed out


class JaxAgreement:
    """`HostAgreement` through the coordination service of `jax.distributed`: per step, one
    atomic increment and one read (no device collective, so it never waits on the device
    queue). Every process must build its iterators in the same order (as SPMD programs do).

    A host that dies, is stopped or loses its network while the others wait for it is named by
    a `HostLostError` within `lost_after_s` + 3 s (33 s by default), well before JAX's runtime
    aborts every process (`heartbeat_timeout_seconds`, 100 s by default); see
    `tpufeed.run.heartbeat`. A host that is alive but does not arrive (it is not iterating) is
    named after `timeout_s`. To change them, pass your own:
    `ds.to_jax(agreement=JaxAgreement(lost_after_s=20))` (keep `lost_after_s` + 3 below JAX's
    `heartbeat_timeout_seconds`)."""

    def __init__(
        self,
        name: str = "jax",
        hosts: int | None = None,
        timeout_s: float = 600.0,
        lost_after_s: float = 30.0,
    ):
        client = _jax_client(hosts)
        import jax

        hosts = jax.process_count() if hosts is None else hosts
        if jax.process_count() != hosts:
            raise InvalidArgumentError(
                f"the pipeline is sharded over {hosts} hosts but jax.distributed runs "
                f"{jax.process_count()} processes: agreeing through jax needs one host per "
                "process, or pass agreement="
            )
        if not lost_after_s >= 3 * BEAT_S or not timeout_s > 0:
            raise InvalidArgumentError(
                f"JaxAgreement needs lost_after_s >= {3 * BEAT_S:g} (a few heartbeats of "
                f"{BEAT_S:g} s) and timeout_s > 0, got {lost_after_s!r} and {timeout_s!r}"
            )
        self._client = client
        self._hosts, self._host = hosts, jax.process_index()
        self._bits = hosts.bit_length()  # one field holds a count of hosts
        self._prefix = f"tpufeed/{name}/{next(_JAX_AGREEMENTS)}/"
        self._timeout_s = timeout_s
        self._step = 0
        self._broken: HostLostError | None = None
        self._heartbeat = Heartbeat(
            client, f"{self._prefix}beat/", self._host, lost_after_s, _connected(client)
        )
        self._calls = _Calls()
        weakref.finalize(self, _stop, self._heartbeat, self._calls)

    def count(self, flags: tuple[bool, ...]) -> tuple[int, ...]:
        """Fields of `bits` bits packed in counters: the first counts the hosts that arrived,
        the others the flags (as many counters as the 31-bit limit needs)."""
        if self._broken is not None:
            raise self._broken
        fields = [1, *map(int, flags)]
        per_counter = max(1, _COUNTER_BITS // self._bits)
        key = f"{self._prefix}{self._step}"
        cancel = threading.Event()
        self._heartbeat.watch(self._step)
        try:
            totals = self._wait(self._calls.submit(self._exchange, key, fields, cancel), cancel)
        except HostLostError as exc:
            self._broken = exc  # this host leaves: its beat goes, and the others learn it at once
            self._heartbeat.stop()
            raise
        finally:
            self._heartbeat.watch(None)
        self._step += 1
        mask = (1 << self._bits) - 1
        counts = [
            (totals[k // per_counter] >> (self._bits * (k % per_counter))) & mask
            for k in range(len(fields))
        ]
        return tuple(counts[1:])

    def _exchange(self, key: str, fields: list[int], cancel: threading.Event) -> list[int]:
        """This host's part of one step (run on the calls thread): add its fields, then tell
        the others the totals (the last to arrive) or read them."""
        per_counter = max(1, _COUNTER_BITS // self._bits)
        totals = []
        try:
            for k in range(0, len(fields), per_counter):
                chunk = fields[k : k + per_counter]
                packed = sum(f << (self._bits * i) for i, f in enumerate(chunk))
                totals.append(self._client.key_value_increment(f"{key}/{k}", packed))
            if totals[0] & ((1 << self._bits) - 1) == self._hosts:  # the last to arrive
                self._client.key_value_set(f"{key}/sum", ",".join(map(str, totals)))
            else:
                totals = self._read_totals(key, cancel)
            if self._host == 0 and self._step >= 2:  # every host has read step - 2's answer
                self._client.key_value_delete(f"{self._prefix}{self._step - 2}")
        except Exception as exc:
            if isinstance(exc, (HostLostError, _Cancelled)):
                raise
            raise HostLostError(
                f"host agreement at step {self._step} ({key}): jax.distributed's coordination "
                f"service (run by process 0) failed: {str(exc).splitlines()[0][:200]}. "
                "Process 0 died or the network to it is cut",
                hosts=(0,),
                step=self._step,
            ) from None
        return totals

    def _read_totals(self, key: str, cancel: threading.Event) -> list[int]:
        """Waits for the last host's totals, a beat at a time, until told to stop."""
        while not cancel.is_set():
            started = now()
            try:
                answer = self._client.blocking_key_value_get(f"{key}/sum", int(BEAT_S * 1000))
            except Exception as exc:  # noqa: BLE001 - the runtime raises its own error types
                if not str(exc).startswith(_NOT_YET):  # judged by the heartbeat; no busy loop
                    cancel.wait(max(0.0, BEAT_S - (now() - started)))
                continue
            return [int(t) for t in answer.split(",")]
        raise _Cancelled

    def _wait(self, future: Future[list[int]], cancel: threading.Event) -> list[int]:
        """The calls thread's answer; meanwhile, once a beat, whether a host is gone."""
        deadline = now() + self._timeout_s
        while True:
            try:
                return future.result(timeout=BEAT_S)
            except FutureTimeout:
                pass
            try:
                self._heartbeat.check(self._step)
                if now() > deadline:
                    raise HostLostError(
                        f"host agreement at step {self._step}: no answer from every process "
                        f"within {self._timeout_s:g} s: "
                        f"{self._heartbeat.behind(self._step, self._hosts)} (a process stopped "
                        "iterating, or built its iterators in another order)",
                        step=self._step,
                    )
            except HostLostError:
                cancel.set()
                try:  # the last host may have answered, then closed its iterator
                    return future.result(timeout=BEAT_S)
                except Exception:  # noqa: BLE001 - no answer after all: the verdict stands
                    pass
                raise


class _Cancelled(Exception):
    """The calls thread stops waiting: the iterator's thread gave up on this step."""


class _Calls:
    """A daemon thread that makes an agreement's calls to the coordination service, so that
    the iterator's thread can give up on a call that never returns (a cut network)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(
            target=_serve, args=(self._jobs,), name="tpufeed-agreement", daemon=True
        ).start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def stop(self) -> None:
        self._jobs.put(None)


def _serve(jobs: queue.SimpleQueue[Any]) -> None:
    while (job := jobs.get()) is not None:
        future, fn, args = job
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            future.set_exception(exc)
        del job, future, fn, args  # holding them would keep the agreement (and its beat) alive


def _stop(heartbeat: Heartbeat, calls: _Calls) -> None:
    heartbeat.stop()
    calls.stop()


def _jax_client(hosts: int | None) -> Any:
    """jax.distributed's client, or an error saying to initialise it."""
    try:
        from jax._src.distributed import global_state

        client = global_state.client
    except ImportError:
        client = None
    if client is None:
        raise InvalidArgumentError(
            f"the {hosts or 'several'} hosts of this run make different numbers of batches and "
            "must agree at each step: call jax.distributed.initialize() first, or pass "
            "agreement= (a tpufeed.run.agreement.HostAgreement)"
        )
    return client


def _connected(client: Any) -> Callable[[], bool]:
    """Whether `client` is still jax.distributed's (it was not shut down)."""
    from jax._src.distributed import global_state

    return lambda: global_state.client is client
