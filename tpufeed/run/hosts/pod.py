"""The pod's view: every host shares a small summary of its input pipeline, and process 0 says
which host holds the step.

On a run of several hosts (jax.distributed or torch.distributed initialised, more than one
process), the first iterator a process starts also starts a daemon thread that, every
`options(pod_interval_s=...)` seconds (30 by default), writes this host's `HostSummary` under
`tpufeed/pod/<host>` in the store the hosts already share: jax.distributed's key-value store,
or torch.distributed's (`tpufeed.run.hosts.torch_store`). That is one small write per host per
interval, made off the training step, with no collective: nobody waits for anybody. Process 0
also reads every host's key at each of its rounds (one directory read, which returns what is
there: a host that is gone just has an older summary) and logs the verdict
(`tpufeed.run.hosts.pod_verdict`) on the `tpufeed` logger when it changes.

`tpufeed.pod_stats()` reads every host's latest summary, on any host; with one host, it is this
host's own, measured since the last call.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from tpufeed.errors import HostLostError, InvalidArgumentError
from tpufeed.order.processes import initialised_runtime, process_of_run
from tpufeed.run.hosts.exit_safe import Exiting, exiting, guarded
from tpufeed.run.hosts.pod_summary import HostSummary, Meter, PodStats
from tpufeed.run.hosts.pod_verdict import Verdicts, fresh, judge
from tpufeed.run.hosts.torch_store import StoreClient

__all__ = ["DIRECTORY", "PodSharer", "latest", "pod_stats", "share"]

DIRECTORY = "tpufeed/pod/"  # host h's summary is DIRECTORY + str(h)
_JAX = "jax.distributed's key-value store (run by process 0)"
_TORCH = "torch.distributed's store (served by rank 0, or by torchrun's agent)"

log = logging.getLogger("tpufeed")


class PodSharer:
    """Shares host `host`'s summary (of `hosts`) through `client` every `interval_s` seconds,
    on a daemon thread, while `connected()`; process 0 also reads the others' and logs the
    verdict. `client` has jax.distributed's client's `key_value_set` and `key_value_dir_get`."""

    def __init__(
        self,
        client: Any,
        service: str,
        host: int,
        hosts: int,
        interval_s: float,
        connected: Callable[[], bool],
    ):
        # guarded: a call on the daemon thread never aborts the process's exit
        self.client, self.service = guarded(client), service
        self.host, self.hosts = host, hosts
        self.interval_s, self._connected = interval_s, connected
        self.pid = os.getpid()
        self._meter = Meter(host, hosts)
        self._verdicts = Verdicts()
        self._lock = threading.Lock()
        self._latest: PodStats | None = None  # process 0's last read
        self._failure = ""  # why the last round failed, said once
        self._retuned = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tpufeed-pod", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive() and self._connected()

    def retune(self, interval_s: float) -> None:
        """Shares every `interval_s` seconds from now on."""
        if interval_s != self.interval_s:
            self.interval_s = interval_s
            self._retuned.set()

    def read(self) -> PodStats:
        """Every host's latest summary, read now: one directory read of the store."""
        read_at = time.time()
        found = {}
        for key, value in self.client.key_value_dir_get(DIRECTORY):
            name = key.rsplit("/", 1)[-1]
            if name.isdigit() and int(name) < self.hosts:
                found[int(name)] = HostSummary.from_json(value, key, read_at)
        missing = tuple(h for h in range(self.hosts) if h not in found)
        hosts = tuple(found[h] for h in sorted(found))
        verdict = judge(fresh(hosts, self.interval_s), self.hosts)
        return PodStats(hosts, self.hosts, missing, verdict.line if verdict else None)

    def latest(self) -> PodStats | None:
        """Process 0's last read (None elsewhere, or before its first round)."""
        with self._lock:
            return self._latest

    def _run(self) -> None:
        while self._connected() and not exiting():
            self._retuned.clear()
            if self._retuned.wait(self.interval_s):
                continue  # a new interval: wait it out from now
            if not self._connected():
                return
            try:
                self._round()
            except Exiting:
                return
            except Exception as exc:  # noqa: BLE001 - the store's clients raise their own types
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """A round that failed is said once a cause (a warning), then only at debug level."""
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        level = logging.DEBUG if why == self._failure else logging.WARNING
        self._failure = why
        log.log(level, "tpufeed: the pod's summaries were not shared this round: %s", why)

    def _round(self) -> None:
        """This host's summary written; on process 0, every host's read and judged."""
        with _measuring:
            summary = self._meter.take()
        self.client.key_value_set(f"{DIRECTORY}{self.host}", summary.to_json(), True)
        if self.host != 0:
            return
        pod = self.read()
        with self._lock:
            lines = self._verdicts.update(pod.hosts, self.hosts, self.interval_s)
            self._latest = pod
        for line in lines:
            log.warning("tpufeed: %s", line)


_lock = threading.Lock()
_sharer: PodSharer | None = None
# Held while a summary is measured (it takes the locks of tpufeed.run.live and observe.counts):
# a fork of this process (a DataLoader's worker) waits for it, so that no child starts with one
# of those locks held by a thread it does not have.
_measuring = threading.Lock()
_fork_safe: list[bool] = []


def _hold_at_fork() -> None:
    if not _fork_safe:
        os.register_at_fork(
            before=_measuring.acquire,
            after_in_parent=_measuring.release,
            after_in_child=_measuring.release,
        )
        _fork_safe.append(True)


def share(interval_s: float | None) -> None:
    """Starts this process's sharing, every `interval_s` seconds, where it runs one host of
    several (None: not for this iterator); a sharing already running takes the new interval."""
    global _sharer
    if interval_s is None or initialised_runtime() is None or _in_data_loader_worker():
        return
    with _lock:
        sharer = _sharing()
        if sharer is not None:
            sharer.retune(interval_s)
            return
        host, hosts = process_of_run()
        if hosts < 2:
            return
        client, service, connected = _store(hosts)
        _hold_at_fork()
        _sharer = PodSharer(client, service, host, hosts, interval_s, connected)


def _sharing() -> PodSharer | None:
    """This process's sharer, while it shares."""
    sharer = _sharer
    if sharer is not None and sharer.pid == os.getpid() and sharer.alive():
        return sharer
    return None


def latest() -> PodStats | None:
    """What process 0 last read of the pod (metrics export it): None on other processes, or
    where no pod is shared."""
    sharer = _sharing()
    return sharer.latest() if sharer is not None else None


_alone: dict[tuple[int, int], Meter] = {}  # this host's meter where nothing is shared


def pod_stats(timeout_s: float = 10.0) -> PodStats:
    """Every host's latest input summary (`PodStats`), read now from the store the hosts share;
    with one host, or where this process shares nothing (no iterator started yet, or
    `pod_interval_s=None`), this host's own, measured since the last call. A host that is gone
    is never waited for: its last summary is there, older (`age_s`). Raises `HostLostError`
    if the store itself does not answer within `timeout_s` (process 0, which serves it, is
    gone, or the network to it is cut)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise InvalidArgumentError(f"timeout_s must be a positive number, got {timeout_s!r}")
    sharer = _sharing()
    if sharer is None:
        host, hosts = process_of_run()
        with _lock, _measuring:
            own = _alone.setdefault((host, hosts), Meter(host, hosts)).take()
        return PodStats((own,), hosts, tuple(h for h in range(hosts) if h != host))
    answer: Future[PodStats] = Future()

    def read() -> None:
        try:
            answer.set_result(sharer.read())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            answer.set_exception(exc)

    threading.Thread(target=read, name="tpufeed-pod-read", daemon=True).start()
    try:
        return answer.result(timeout=timeout_s)
    except FutureTimeout:
        raise HostLostError(
            f"pod_stats: {sharer.service} did not answer within {timeout_s:g} s: process 0, "
            "which serves it, died or was stopped, or the network to it is cut",
            hosts=(0,),
        ) from None


def _in_data_loader_worker() -> bool:
    """A PyTorch DataLoader's worker runs iterators for its process: it shares nothing."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _store(hosts: int) -> tuple[Any, str, Callable[[], bool]]:
    """The store of the run's runtime: a client, its name in errors, and whether it is still
    the process's."""
    if initialised_runtime() == "torch":
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _get_default_store

        return StoreClient(_get_default_store(), hosts), _TORCH, dist.is_initialized
    from jax._src.distributed import global_state

    client = global_state.client
    return client, _JAX, lambda: global_state.client is client
