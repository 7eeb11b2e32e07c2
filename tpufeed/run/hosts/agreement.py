"""How the hosts of a run agree at a step: a small collective every host calls at once.

`tpufeed.run.hosts.uneven` ends every host's epoch at the same step by asking, through a
`HostAgreement`, how many hosts still have a batch for it. Any object with `count(flags)` is
one; tpufeed gives `JaxAgreement` (the coordination service of `jax.distributed`),
`TorchAgreement` (the store of `torch.distributed`) and `ThreadAgreement` (hosts that are
threads of one process: tests and simulations). By default (`default_agreement`) a run agrees
through torch.distributed where it is initialised and jax.distributed is not, else through
jax.distributed.

>>> a, b = ThreadAgreement.group(2)   # doctest: +SKIP
>>> # in thread 0: a.count((True, False)); in thread 1: b.count((True, True)) -> both (2, 1)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, Protocol

from tpufeed.errors import InvalidArgumentError, TpufeedError
from tpufeed.order.processes import initialised_runtime
from tpufeed.run.hosts.key_value_agreement import KeyValueAgreement
from tpufeed.run.hosts.torch_store import StoreClient

__all__ = [
    "HostAgreement",
    "JaxAgreement",
    "ThreadAgreement",
    "TorchAgreement",
    "default_agreement",
]


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


_AGREEMENTS = itertools.count()  # keys of each agreement of this process: one prefix each
_JAX_SERVICE = "jax.distributed's coordination service (run by process 0)"
_TORCH_SERVICE = "torch.distributed's store (served by rank 0, or by torchrun's agent)"


def default_agreement(name: str, hosts: int) -> KeyValueAgreement:
    """The agreement of a run that was given none: torch.distributed's where it is initialised
    and jax.distributed is not, else jax.distributed's (which says to initialise one)."""
    if initialised_runtime() == "torch":
        return TorchAgreement(name, hosts=hosts)
    return JaxAgreement(name, hosts=hosts)


class JaxAgreement(KeyValueAgreement):
    """`HostAgreement` through the coordination service of `jax.distributed`: per step, one
    atomic increment and one read (no device collective, so it never waits on the device
    queue). Every process must build its iterators in the same order (as SPMD programs do).

    A host that dies, is stopped or loses its network while the others wait for it is named by
    a `HostLostError` within `lost_after_s` + 3 s (33 s by default), well before JAX's runtime
    aborts every process (`heartbeat_timeout_seconds`, 100 s by default); see
    `tpufeed.run.hosts.heartbeat`. A host that is alive but does not arrive (it is not iterating) is
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
        prefix = f"tpufeed/{name}/{next(_AGREEMENTS)}/"
        host = jax.process_index()
        connected = _connected(client)
        # the coordination service's counters hold 32-bit signed ints
        super().__init__(
            client, _JAX_SERVICE, prefix, hosts, host, timeout_s, lost_after_s, 31, connected
        )


class TorchAgreement(KeyValueAgreement):
    """`HostAgreement` through the store of `torch.distributed` (DDP, FSDP, torch_xla): per
    step, one atomic `add` and a read of the totals (`tpufeed.run.hosts.torch_store`). No collective
    of any process group is used, so the agreement never interleaves with the training's own
    collectives (NCCL, gloo or xla), and `torch.distributed.algorithms.Join` is not needed.
    Every process must build its iterators in the same order (as SPMD programs do).

    A host that dies, is stopped or loses its network while the others wait for it is named by
    a `HostLostError` within `lost_after_s` + 3 s (33 s by default); one that is alive but does
    not arrive, after `timeout_s`. Chosen by default where torch.distributed is initialised
    and jax.distributed is not; to change the bounds pass your own:
    `ds.iterator(uneven="pad", agreement=TorchAgreement(lost_after_s=20))`."""

    def __init__(
        self,
        name: str = "torch",
        hosts: int | None = None,
        timeout_s: float = 600.0,
        lost_after_s: float = 30.0,
    ):
        dist = _torch_distributed(hosts)
        world = dist.get_world_size()
        hosts = world if hosts is None else hosts
        if world != hosts:
            raise InvalidArgumentError(
                f"the pipeline is sharded over {hosts} hosts but torch.distributed runs "
                f"{world} processes (its world size): agreeing through torch needs one host "
                "per process, or pass agreement="
            )
        from torch.distributed.distributed_c10d import _get_default_store

        client = StoreClient(_get_default_store(), hosts)
        prefix = f"tpufeed/{name}/{next(_AGREEMENTS)}/"
        # a store's counters are 64-bit signed ints
        super().__init__(
            client,
            _TORCH_SERVICE,
            prefix,
            hosts,
            dist.get_rank(),
            timeout_s,
            lost_after_s,
            63,
            dist.is_initialized,
        )


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
            "must agree at each step: call jax.distributed.initialize() or "
            "torch.distributed.init_process_group() first, or pass agreement= (a "
            "tpufeed.run.hosts.agreement.HostAgreement)"
        )
    return client


def _connected(client: Any) -> Callable[[], bool]:
    """Whether `client` is still jax.distributed's (it was not shut down)."""
    from jax._src.distributed import global_state

    return lambda: global_state.client is client


def _torch_distributed(hosts: int | None) -> Any:
    """torch.distributed, or an error saying to initialise it."""
    dist: Any = None
    try:
        import torch.distributed

        dist = torch.distributed
    except ImportError:
        pass
    if dist is None or not dist.is_available() or not dist.is_initialized():
        raise InvalidArgumentError(
            f"TorchAgreement: the {hosts or 'several'} hosts of this run agree through "
            "torch.distributed's store, but torch.distributed is not initialised: call "
            "torch.distributed.init_process_group() first (torchrun sets its environment)"
        )
    return dist
