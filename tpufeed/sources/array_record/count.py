"""The record count of a gs:// ArrayRecord file, read from a few byte ranges of it.

Counting a shard should not download it: the head (its structure), the last block (the
postscript, which says where the footer starts) and the footer are fetched by ranges, laid
out at their offsets in a sparse local file of the object's size
(`tpufeed.storage.array_record_footer`), and array_record's reader counts from that.
"""

from __future__ import annotations

import contextlib
import os
import uuid

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
from tpufeed.storage.remote import RemoteFile

__all__ = ["count_by_ranges"]


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
    if start is None:  # not the layout we know: the caller counts from a whole copy instead
        return None
    pieces = [(0, head), (size - BLOCK_SIZE, last)]
    if start < size - BLOCK_SIZE:
        pieces.append((start, remote.read_ranges([(start, size - BLOCK_SIZE)])[0]))
    sparse = os.path.join(
        remote.cache.scratch_dir(), f"count-{os.getpid()}-{uuid.uuid4().hex[:12]}.array_record"
    )
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
