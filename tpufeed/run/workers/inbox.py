"""`Inbox`: a worker's result pipe, as the parent reads it."""

from __future__ import annotations

import os
import select
from typing import Any

from tpufeed.run.workers.messages import AnswerMemo, decode_result

_READ_BYTES = 1 << 16  # a pipe's capacity


class Inbox:
    """A worker's result pipe, read in large reads: the messages are `Connection.send_bytes`
    frames (a 4-byte big-endian length, or -1 and an 8-byte one), and one read takes every
    frame waiting, where `Connection.recv` makes two reads per message."""

    def __init__(self, fd: int):
        self.fd = fd
        self.memo = AnswerMemo()
        self._buffer = bytearray()

    def read(self) -> list[Any]:
        """The messages now whole, after one read (more only to finish a frame begun)."""
        chunk = os.read(self.fd, _READ_BYTES)
        if not chunk:
            raise EOFError
        buffer = self._buffer
        buffer += chunk
        frames = []
        at = 0
        while True:
            frame = _frame_at(buffer, at)
            if frame is None:
                break
            start, end = frame
            while end > len(buffer):  # a frame begun: its writer finishes it, so wait for it
                more = os.read(self.fd, max(_READ_BYTES, end - len(buffer)))
                if not more:
                    raise EOFError
                buffer += more
            frames.append(bytes(buffer[start:end]))
            at = end
        del buffer[:at]  # taken before decoding: a message that fails to decode is not read twice
        return [decode_result(frame, self.memo) for frame in frames]

    def waiting(self) -> bool:
        """Whether bytes wait to be read."""
        return bool(select.select([self.fd], [], [], 0)[0])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _frame_at(buffer: bytearray, at: int) -> tuple[int, int] | None:
    """(start, end) of the frame whose header is at `at`, once its header is whole."""
    if len(buffer) - at < 4:
        return None
    size = int.from_bytes(buffer[at : at + 4], "big", signed=True)
    if size != -1:
        return at + 4, at + 4 + size
    if len(buffer) - at < 12:
        return None
    return at + 12, at + 12 + int.from_bytes(buffer[at + 4 : at + 12], "big")
