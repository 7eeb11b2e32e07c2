"""A host agreement over a key-value service that every process of a run reaches.

`JaxAgreement` (jax.distributed's coordination service) and `TorchAgreement`
(torch.distributed's store) are the same algorithm over two services: per step, one atomic
increment of a counter per host and one read of the totals, which the last host to arrive
writes; a heartbeat (`tpufeed.run.hosts.heartbeat`) names a host that went missing meanwhile. The
service is a client with the methods of jax.distributed's: `key_value_increment`,
`key_value_set`, `blocking_key_value_get`, `key_value_delete` and `key_value_dir_get`
(`tpufeed.run.hosts.torch_store.StoreClient` gives them over a torch store).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from tpufeed.errors import HostLostError, InvalidArgumentError
from tpufeed.ops.base import now
from tpufeed.run.hosts.exit_safe import guarded
from tpufeed.run.hosts.heartbeat import BEAT_S, Heartbeat

__all__ = ["NOT_YET", "KeyValueAgreement"]

NOT_YET = "DEADLINE_EXCEEDED"  # how a client says a blocking read timed out


class KeyValueAgreement:
    """Counts flags over `hosts` processes through `client`, this one being `host`; `service`
    names the service in errors, `counter_bits` is the width of its counters (less the sign),
    `connected()` says whether `client` is still the process's (see `Heartbeat`)."""

    def __init__(
        self,
        client: Any,
        service: str,
        prefix: str,
        hosts: int,
        host: int,
        timeout_s: float,
        lost_after_s: float,
        counter_bits: int,
        connected: Callable[[], bool],
    ):
        if not lost_after_s >= 3 * BEAT_S or not timeout_s > 0:
            raise InvalidArgumentError(
                f"{type(self).__name__} needs lost_after_s >= {3 * BEAT_S:g} (a few heartbeats "
                f"of {BEAT_S:g} s) and timeout_s > 0, got {lost_after_s!r} and {timeout_s!r}"
            )
        client = guarded(client)  # its calls on daemon threads never abort the process's exit
        self._client, self._service = client, service
        self._hosts, self._host = hosts, host
        self._bits = hosts.bit_length()  # one field holds a count of hosts
        self._per_counter = max(1, counter_bits // self._bits)
        self._prefix = prefix
        self._timeout_s = timeout_s
        self._step = 0
        self._broken: HostLostError | None = None
        self._heartbeat = Heartbeat(
            client, f"{prefix}beat/", host, lost_after_s, connected, service
        )
        self._calls = _Calls()
        weakref.finalize(self, _stop, self._heartbeat, self._calls)

    def count(self, flags: tuple[bool, ...]) -> tuple[int, ...]:
        """Fields of `bits` bits packed in counters: the first counts the hosts that arrived,
        the others the flags (as many counters as the counters' width needs)."""
        if self._broken is not None:
            raise self._broken
        fields = [1, *map(int, flags)]
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
            (totals[k // self._per_counter] >> (self._bits * (k % self._per_counter))) & mask
            for k in range(len(fields))
        ]
        return tuple(counts[1:])

    def _exchange(self, key: str, fields: list[int], cancel: threading.Event) -> list[int]:
        """This host's part of one step (run on the calls thread): add its fields, then tell
        the others the totals (the last to arrive) or read them."""
        totals = []
        try:
            for k in range(0, len(fields), self._per_counter):
                chunk = fields[k : k + self._per_counter]
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
                f"host agreement at step {self._step} ({key}): {self._service} failed: "
                f"{str(exc).splitlines()[0][:200]}. Process 0 died or the network to it is cut",
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
                if not str(exc).startswith(NOT_YET):  # judged by the heartbeat; no busy loop
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
    """A daemon thread that makes an agreement's calls to the service, so that the iterator's
    thread can give up on a call that never returns (a cut network)."""

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
