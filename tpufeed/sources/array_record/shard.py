"""An ArrayRecord shard as the build writes it: the records, then the footer's padding as holes.

ArrayRecord pads its footer and postscript to 64 KiB blocks, and its reader finds the
postscript in the file's last 64 KiB, so every file is at least 128 KiB long even for a few
records. The padding is zeros: as holes it takes no disk space.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tpufeed.sources.array_record.writer import write_array_records

__all__ = ["write_array_record_shard"]

_PAGE = 4096
_SPARSE_BELOW = 1 << 20  # files smaller than this get their zero padding back as holes


def write_array_record_shard(
    path: str, records: Iterable[bytes], options: str | None = None
) -> int:
    """Writes `records` to a new ArrayRecord file (`options`: the writer's, default
    "group_size:1"), small files with their zero pages as holes; returns the count."""
    # No record map yet: a built dataset's files are the ones its manifest names and checks,
    # and the build publishes and uploads exactly those.
    count = write_array_records(path, records, options=options or "group_size:1", record_map=False)
    _sparsify(path)
    return count


def _sparsify(path: str) -> None:
    """Rewrites a small file with its all-zero pages as holes (same bytes, CRC and size)."""
    size = os.path.getsize(path)
    if size >= _SPARSE_BELOW:
        return  # the padding is at most 128 KiB: not worth rewriting a large file for
    with open(path, "rb") as f:
        data = f.read()
    zero = bytes(_PAGE)
    if not any(data[i : i + _PAGE] == zero for i in range(0, size - _PAGE + 1, _PAGE)):
        return
    tmp = f"{path}.sparse-{os.urandom(4).hex()}"
    try:
        with open(tmp, "xb") as f:
            for i in range(0, size, _PAGE):
                page = data[i : i + _PAGE]
                if page == zero:
                    f.seek(_PAGE, os.SEEK_CUR)
                else:
                    f.write(page)
            f.truncate(size)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
