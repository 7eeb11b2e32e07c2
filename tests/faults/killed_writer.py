"""A process that reads a dataset and stops in the middle of writing a derived file, for the
SIGKILL case of tests/faults/test_derived_faults.py:

    python -m tests.faults.killed_writer KIND LOCATION DERIVED

It opens kind KIND's pipeline (tests/faults/derived_kinds.py) over LOCATION with its derived
files under DERIVED and reads it. The write that makes a derived file is wrapped: once part of
the file is on disk, under its temporary name, it prints "mid-write PATH" and waits; the parent
SIGKILLs it there. So the kill lands inside that write every time, not by chance.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

WAIT_S = 120.0  # the parent kills this process long before


def stop_here(what: str) -> None:
    print(f"mid-write {what}", flush=True)
    time.sleep(WAIT_S)
    os._exit(3)  # not killed: the parent's wait fails on the exit status


def wrap_derived() -> None:
    """`storage.derived.write_derived`: tar and TFRecord indexes, MDS copies, cache facts."""
    from tpufeed.storage import derived

    real = derived._Checksummed.write

    def write(self: Any, data: Any) -> int:
        written = real(self, data)
        self.raw.flush()  # on disk, under the temporary name
        stop_here(self.raw.name)
        return written

    derived._Checksummed.write = write  # type: ignore[method-assign]


def wrap_record_cache() -> None:
    """An entry of the record cache: its header written, its payload not."""
    from tpufeed.storage import record_cache

    real = record_cache._write_new

    def write_new(path: str, parts: list[bytes]) -> None:
        if os.path.basename(path).startswith("writing"):  # the put's marker, written first
            real(path, parts)
            return
        real(path, parts[:1])
        stop_here(path)

    record_cache._write_new = write_new


def wrap_shard_cache() -> None:
    """A download into the shard cache: its part file filled, not yet checked and renamed."""
    from tpufeed.storage.cache import fill as cache_fill

    real = cache_fill.download

    def download(obj: Any, out: int, *args: Any, **kwargs: Any) -> None:
        real(obj, out, *args, **kwargs)
        stop_here(obj.url)

    cache_fill.download = download


def wrap_cache_record() -> None:
    """The shard cache's record of a verified copy: written whole to its temporary, not yet
    renamed into place."""
    real = os.replace

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".json") and os.path.basename(os.path.dirname(dst)) == "shards":
            stop_here(str(src))
        real(src, dst, **kwargs)

    os.replace = replace


WRAPS = {
    "derived": wrap_derived,
    "record cache": wrap_record_cache,
    "shard cache": wrap_shard_cache,
    "shard cache record": wrap_cache_record,
}


def main(argv: list[str]) -> None:
    from tests.faults.derived_kinds import DERIVED

    kind = DERIVED[argv[0]]
    WRAPS[kind.writer]()
    list(kind.open(argv[1], Path(argv[2])))
    print("done: no derived file was written", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
