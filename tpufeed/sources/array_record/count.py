"""The record count of a gs:// ArrayRecord file, read from a few byte ranges of it.

Counting a shard should not download it: the head (its structure), the last block (the
postscript, which says where the footer starts) and the footer are fetched by ranges, laid
out at their offsets in a sparse local file of the object's size
(`tpufeed.storage.array_record_footer`), and array_record's reader counts from that. The
sparse file is a temporary named by its writer (`tpufeed.storage.derived.temporary_name`):
one left by a process killed while it counted is removed by the next count.
"""

from __future__ import annotations

import contextlib
import os

from array_record.python.array_record_module import ArrayRecordReader

from tpufeed.errors import CorruptDataError
from tpufeed.sources.array_record.structure import (
    MIN_FILE_SIZE,
    READER_OPTIONS,
    RIEGELI_SIGNATURE,
    close_reporting,
    structure_problem,
)
from tpufeed.storage.array_record_footer import BLOCK_SIZE, footer_offset, sparse_copy
from tpufeed.storage.derived import remove_dead_temporaries, temporary_name
from tpufeed.storage.remote import RemoteFile

__all__ = ["MAX_FOOTER_BYTES", "count_by_ranges"]

# A footer is a few dozen bytes per chunk: 64 MiB is millions of chunks. One that says it is
# larger is not fetched into memory by ranges (the file is counted from its whole copy).
MAX_FOOTER_BYTES = 64 << 20


def count_by_ranges(remote: RemoteFile) -> int | None:
    """Counts records from the head, the footer and the postscript block of a gs:// file;
    None if its footer is not laid out as this module knows."""
    obj = remote.obj
    size = obj.size
    if size < MIN_FILE_SIZE:
        head = remote.read_ranges([(0, size)])[0] if size else b""
        raise CorruptDataError(f"{obj.url}: {structure_problem(size, head)}", path=obj.url)
    head, last = remote.read_ranges([(0, len(RIEGELI_SIGNATURE)), (size - BLOCK_SIZE, size)])
    problem = structure_problem(size, head)
    if problem is not None:
        raise CorruptDataError(f"{obj.url}: {problem}", path=obj.url)
    start = footer_offset(last, size)
    # Not the layout we know, or a footer too large to fetch by ranges: the caller counts
    # from a whole copy instead.
    if start is None or size - BLOCK_SIZE - start > MAX_FOOTER_BYTES:
        return None
    pieces = [(0, head), (size - BLOCK_SIZE, last)]
    if start < size - BLOCK_SIZE:
        pieces.append((start, remote.read_ranges([(start, size - BLOCK_SIZE)])[0]))
    scratch = remote.cache.scratch_dir()
    remove_dead_temporaries(scratch)  # probes of processes killed while counting
    sparse = temporary_name(os.path.join(scratch, "count.array_record"))
    try:
        sparse_copy(sparse, size, pieces)
        reader = ArrayRecordReader(sparse, READER_OPTIONS)
        count, ok = reader.num_records(), reader.ok()
        why = close_reporting(reader)
    except Exception as e:  # array_record raises RuntimeError, or others via pybind
        raise CorruptDataError(
            f"{obj.url}: array_record cannot read its footer: {e}", path=obj.url
        ) from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(sparse)
    if not ok:
        raise CorruptDataError(
            f"{obj.url}: its ArrayRecord footer or postscript is damaged ({why})", path=obj.url
        )
    return count
