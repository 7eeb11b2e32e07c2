"""A torch.distributed store seen as a key-value client with jax.distributed's methods, so that
`TorchAgreement` runs the same agreement and heartbeat as `JaxAgreement` (see
`tpufeed.run.hosts.key_value_agreement`).

The store is the one `torch.distributed.init_process_group` made (a TCPStore served by rank 0,
or by torchrun's agent): no collective of any process group is used, so the agreement never
interleaves with the training's collectives, whatever their backend (NCCL, gloo, xla). A store
has no blocking read with a short timeout that leaves the connection free (`wait` holds the
client for its whole timeout and logs each expiry), so a read polls `check`, a few
milliseconds apart.
"""

from __future__ import annotations

import time
from typing import Any

from tpufeed.run.hosts.key_value_agreement import NOT_YET

__all__ = ["StoreClient"]

_UNSET = "-"  # a beat key made by another host before its owner beat: read as absent
_FIRST_POLL_S, _LAST_POLL_S = 0.0005, 0.01  # a waiting read's polls: doubling up to this


class StoreClient:
    """`store` (a `torch.distributed.Store`) as the client of a `KeyValueAgreement` over
    `hosts` processes: `key_value_dir_get` reads the keys `directory + "0"` ... one per host."""

    def __init__(self, store: Any, hosts: int):
        self._store, self._hosts = store, hosts
        self._leaves = {"sum"}  # the keys a step's directory holds, to delete it
        self._made: set[str] = set()  # directories whose beat keys exist

    def key_value_increment(self, key: str, amount: int) -> int:
        self._leaves.add(key.rsplit("/", 1)[-1])
        return int(self._store.add(key, amount))

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = True) -> None:
        self._store.set(key, value)

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        deadline = time.monotonic() + timeout_ms / 1000
        pause = _FIRST_POLL_S
        while not self._store.check([key]):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{NOT_YET}: {key} not set within {timeout_ms} ms")
            time.sleep(pause)
            pause = min(2 * pause, _LAST_POLL_S)
        return self._store.get(key).decode()

    def key_value_delete(self, directory: str) -> None:
        for leaf in sorted(self._leaves):
            self._store.delete_key(f"{directory}/{leaf}")

    def key_value_dir_get(self, directory: str) -> list[tuple[str, str]]:
        """The beats under `directory` (one read: every host's key is made on the first)."""
        keys = [f"{directory}{host}" for host in range(self._hosts)]
        if directory not in self._made:
            for key in keys:  # sets only a key that does not exist yet
                self._store.compare_set(key, "", _UNSET)
            self._made.add(directory)
        values = [value.decode() for value in self._store.multi_get(keys)]
        return [(key, value) for key, value in zip(keys, values) if value != _UNSET]
