"""Per-record random generators derived from (seed, stream, epoch, record index) alone."""

from __future__ import annotations

import hashlib

import numpy as np


class RecordRngs:
    """Hands out the generator of one record: the same numbers whoever asks and when.

    Philox is counter-based: the key comes from (seed, stream), the counter starts at
    (0, record, epoch, 0). Resetting one bit generator costs ~2 µs, a new one ~10 µs.
    """

    def __init__(self, seed: int, stream: int):
        digest = hashlib.blake2b(f"tpufeed-rng:{seed}:{stream}".encode(), digest_size=16).digest()
        self._key = np.frombuffer(digest, dtype="<u8").copy()
        self._bitgen = np.random.Philox(key=self._key)
        self._generator = np.random.Generator(self._bitgen)
        self._buffer = self._bitgen.state["buffer"]

    def for_record(self, epoch: int, record: int) -> np.random.Generator:
        counter = np.array([0, record, epoch, 0], dtype=np.uint64)
        self._bitgen.state = {
            "bit_generator": "Philox",
            "state": {"counter": counter, "key": self._key},
            "buffer": self._buffer,
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        return self._generator

    def __getstate__(self) -> dict:
        return {"key": self._key}

    def __setstate__(self, state: dict) -> None:
        self._key = state["key"]
        self._bitgen = np.random.Philox(key=self._key)
        self._generator = np.random.Generator(self._bitgen)
        self._buffer = self._bitgen.state["buffer"]
