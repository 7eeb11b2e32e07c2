"""What makes a file an ArrayRecord file that array_record's reader can be trusted with.

array_record's reader does not raise on a damaged file: a file cut in half, a zero-length file
or random bytes all open "fine" and report 0 records. So a file's structure is checked before
the reader's record count is trusted (`tpufeed.sources.array_record.file`):

1. the first 64 bytes are the fixed Riegeli file signature (block header + signature chunk);
2. the size is a whole number of 64 KiB Riegeli blocks, at least two (the writer pads the footer
   and the postscript to block boundaries, and the reader looks for the postscript exactly 64 KiB
   before the end, so every readable file has such a size);
3. the reader's `ok()` is true after it has read the postscript and the footer (both carry
   hashes, so a flipped bit there turns `ok()` false).

Damage inside record data is caught by Riegeli's per-chunk hashes when the record is read.
This module holds the checks that need no reader (1 and 2), the options readers are opened
with, and what a reader tells only when it closes or in its writer options.
"""

from __future__ import annotations

import os
import re

from array_record.python.array_record_module import ArrayRecordReader

from tpufeed.errors import CorruptDataError

__all__ = [
    "MIN_FILE_SIZE",
    "READER_OPTIONS",
    "RIEGELI_SIGNATURE",
    "changed_in_place",
    "close_reporting",
    "group_size",
    "structure_problem",
]

# For random access: no readahead, and no read-ahead threads (batched reads measured as fast).
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"

_BLOCK_SIZE = 1 << 16
# Every Riegeli file starts with these 64 bytes: a block header (hash, previous chunk 0, next
# chunk at 64) followed by the header of the data-less signature chunk (type 's').
RIEGELI_SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f"
    "0000000000000000"
    "4000000000000000"
    "91bac23c9287e1a9"
    "0000000000000000"
    "e19f13c0e9b1c372"
    "7300000000000000"
    "0000000000000000"
)
MIN_FILE_SIZE = 2 * _BLOCK_SIZE  # the signature block and the postscript block


def structure_problem(size: int, head: bytes) -> str | None:
    """Says what is wrong with a file of `size` bytes starting with `head`, or None if nothing."""
    if size == 0:
        return "file is empty (0 bytes), not an ArrayRecord file"
    if head[: len(RIEGELI_SIGNATURE)] != RIEGELI_SIGNATURE:
        if size < len(RIEGELI_SIGNATURE) and RIEGELI_SIGNATURE.startswith(head):
            return f"file is truncated: {size:,} bytes, shorter than the Riegeli file signature"
        return (
            f"does not start with the Riegeli file signature (it starts with "
            f"{head[:16].hex()}): not an ArrayRecord file, or its header is damaged"
        )
    if size % _BLOCK_SIZE:
        return (
            f"file is truncated (or has bytes appended): {size:,} bytes is not a whole "
            "number of 64 KiB Riegeli blocks, so the ArrayRecord postscript cannot be found"
        )
    if size < MIN_FILE_SIZE:
        return (
            f"file is truncated: {size:,} bytes cannot hold both the signature block and "
            f"the ArrayRecord postscript block ({MIN_FILE_SIZE:,} bytes at least)"
        )
    return None


def close_reporting(reader: ArrayRecordReader) -> str:
    """Closes `reader`; returns why it had failed, which array_record only tells on close."""
    try:
        reader.close()
    except Exception as e:  # noqa: BLE001 - the reader's failure status, as RuntimeError
        return str(e)
    return "no reason given"


def group_size(writer_options: str | None) -> int | None:
    """The records per chunk recorded in a file's writer options ('' or None in old files)."""
    match = re.search(r"(?:^|,)group_size:(\d+)(?:,|$)", writer_options or "")
    return int(match.group(1)) if match else None


def changed_in_place(
    path: str, opened: str, before: tuple[int, ...], record: int
) -> CorruptDataError | None:
    """The error to raise if the file a reader opened as `opened` (device, inode, size and
    mtime_ns `before`) was truncated or rewritten in place since; None otherwise (a file
    replaced or deleted under its name is not: the reader still reads the one it opened)."""
    try:
        st = os.stat(opened)
    except OSError:
        return None
    if (st.st_dev, st.st_ino) != before[:2] or (st.st_size, st.st_mtime_ns) == before[2:]:
        return None
    return CorruptDataError(
        f"{path} record {record}: the file changed while it was being read: it has "
        f"{st.st_size:,} bytes now and had {before[2]:,} when opened (truncated or rewritten "
        "in place); its records cannot be trusted",
        path=path,
        record=record,
    )
