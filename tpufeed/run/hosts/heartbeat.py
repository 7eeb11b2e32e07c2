"""Telling a host that is slow from one that is gone, for `JaxAgreement` and `TorchAgreement`.

At an agreement a host waits for every other host to arrive. One that has not arrived may be
working (a slow shard, a long restore) or gone: killed, stopped, or cut off from the network.
JAX's runtime tells them apart by heartbeats of its own, but acts only `heartbeat_timeout_seconds`
(100 s by default) after a host went silent, and then by aborting every process, with no word
from tpufeed; torch.distributed's store names nobody, and a wait on it lasts its timeout (30
minutes by default). So each process beats for its agreement too: a thread sets a key of the
coordination service (or store) every `BEAT_S` seconds, holding a count and the step the host
is at.

While this host waits at an agreement, the same thread also reads every host's beat:

- a host whose beat has not changed over `lost_after_s` of reading is lost (killed, stopped,
  cut off), and so is one whose last beat says it left (it closed its iterator, or gave up
  after naming a lost host itself);
- this process has lost the coordination service when its own beats have not gone through
  for `lost_after_s` (process 0, which runs the service, died or stopped, or the network to it
  is cut).

`Heartbeat.check` then raises `HostLostError` naming the process, within `lost_after_s` plus
3 beats of the later of its last beat and the start of the wait. A host that never beat for this
agreement is not judged: it may not have built its iterator yet (`JaxAgreement`'s `timeout_s`
bounds that wait). Outside a wait the thread only beats: one small key write a second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tpufeed.errors import HostLostError
from tpufeed.ops.base import now
from tpufeed.run.hosts.exit_safe import exiting

__all__ = ["BEAT_S", "Heartbeat"]

BEAT_S = 1.0  # seconds between two beats of a host, and between two reads of the others' beats


class Heartbeat:
    """Beats for host `host` under `directory` of the coordination service (`client`), and
    reads the other hosts' beats while this host waits (`watch`). `connected()` says whether
    `client` is still the process's (jax.distributed was not shut down); the thread ends when
    it is not, or at `stop()`. `service` names the service in errors."""

    def __init__(
        self,
        client: Any,
        directory: str,
        host: int,
        lost_after_s: float,
        connected: Callable[[], bool],
        service: str = "jax.distributed's coordination service (run by process 0)",
    ):
        self._client, self._directory, self._host = client, directory, host
        self._service = service
        self._lost_after_s, self._connected = lost_after_s, connected
        self._lock = threading.Lock()
        self._step: int | None = None  # the step this host waits at (None: not waiting)
        self._last_step = -1  # the last step this host reached
        # host -> (its beat, when this host first read that beat)
        self._seen: dict[int, tuple[str, float]] = {}
        self._last_read = 0.0  # when the beats were last read
        self._round_started: float | None = None  # a write or read that has not returned
        self._failing_since: float | None = None  # the first failed round since one went through
        self._failure = ""
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="tpufeed-heartbeat", daemon=True).start()

    def watch(self, step: int | None) -> None:
        """This host now waits at agreement `step` (None: it no longer waits)."""
        with self._lock:
            self._step = step
            if step is not None:
                self._last_step = step

    def stop(self) -> None:
        self._stop.set()

    def check(self, step: int) -> None:
        """Raises HostLostError when this process has lost the coordination service, or another
        host is gone, while this host waits at `step`."""
        at = now()
        limit = self._lost_after_s
        with self._lock:
            stuck = self._round_started is not None and at - self._round_started >= limit
            failing = self._failing_since is not None and at - self._failing_since >= limit
            lost = {
                host: beat
                for host, (beat, since) in self._seen.items()
                if beat.endswith(_LEFT) or self._last_read - since >= limit
            }
            failure = self._failure if failing else "a call that never returned"
        if stuck or failing:
            raise HostLostError(
                f"process {self._host} has had no answer from {self._service} "
                f"for {limit:g} s while waiting at host agreement "
                f"step {step} ({failure}): process 0 died or was stopped, or the network between "
                f"them is cut. {_RESTART}",
                hosts=(0,),
                step=step,
            )
        if lost:
            raise HostLostError(
                f"host agreement at step {step}: "
                + "; ".join(_lost(host, beat, limit) for host, beat in sorted(lost.items()))
                + f". Process {self._host} cannot go on without "
                + f"{'it' if len(lost) == 1 else 'them'}. {_RESTART}",
                hosts=tuple(sorted(lost)),
                step=step,
            )

    def behind(self, step: int, hosts: int) -> str:
        """Which hosts have not reached `step`, as far as their beats tell: for a timeout."""
        with self._lock:
            seen = dict(self._seen)
        parts = []
        for host in range(hosts):
            if host == self._host:
                continue
            if host not in seen:
                parts.append(f"process {host} never reached this iterator's agreement")
            elif _step_of(seen[host][0]) < step:
                parts.append(f"process {host} is alive at step {_step_of(seen[host][0])}")
        return "; ".join(parts) or "every process has reached this step"

    def _run(self) -> None:
        count = 0
        while not self._stop.is_set() and self._connected() and not exiting():
            self._round(count)
            count += 1
            self._stop.wait(BEAT_S)
        if self._connected():  # a last beat that says this host left
            try:
                self._client.key_value_set(
                    f"{self._directory}{self._host}", f"{count},{self._last_step},{_LEFT}", True
                )
            except Exception:  # noqa: BLE001 - the runtime raises its own error types
                pass

    def _round(self, count: int) -> None:
        """One beat, and one read of every beat if this host is waiting."""
        with self._lock:
            beat, watching = f"{count},{self._last_step}", self._step is not None
            self._round_started = now()
        try:
            self._client.key_value_set(f"{self._directory}{self._host}", beat, True)
            beats = self._client.key_value_dir_get(self._directory) if watching else None
        except Exception as exc:  # noqa: BLE001 - the runtime raises its own error types
            with self._lock:
                self._round_started = None
                if self._failing_since is None:
                    self._failing_since = now()
                self._failure = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            return
        with self._lock:
            self._round_started = self._failing_since = None
            if beats is not None:
                self._record(beats, now())

    def _record(self, beats: list[tuple[str, str]], at: float) -> None:
        current = {}
        for key, beat in beats:
            name = key.rsplit("/", 1)[-1]
            if name.isdigit():
                current[int(name)] = beat
        for host, beat in current.items():
            if host != self._host and (host not in self._seen or self._seen[host][0] != beat):
                self._seen[host] = (beat, at)
        self._last_read = at


_RESTART = (
    "Restart every process from the last checkpoint all hosts saved (on fewer hosts: give each "
    "the list of all hosts' states, see docs/multi-host.md)"
)


_LEFT = "left"  # the last beat of a host that closed its iterator or gave up on the run


def _step_of(beat: str) -> int:
    return int(beat.split(",")[1])


def _lost(host: int, beat: str, limit: float) -> str:
    step = _step_of(beat)
    where = f"at step {step}" if step >= 0 else "before its first step"
    if beat.endswith(_LEFT):
        return f"process {host} left this iterator {where} (it closed it, or gave up on the run)"
    return (
        f"process {host} stopped answering (last heard {where}, no heartbeat for {limit:g} s): "
        "it died, was stopped, or lost its network"
    )
