"""What a Parquet footer must agree with before its row counts and columns are trusted.

Parquet keeps no checksum of its footer (page CRCs, where written, cover page data only), so a
damaged footer can parse and still describe other rows. What it repeats can be compared:

- the file's row count against the sum of its row groups' counts, none negative;
- the column names, and which columns hold text rather than bytes, against the Arrow schema
  that Arrow writers (pyarrow, pandas, polars) store beside them, base64 in the `ARROW:schema`
  key: a flipped byte in one copy makes them differ. (Not whole types: these legitimately
  differ between the two, a dictionary column's value type for one.)

pyarrow reads the footer itself and refuses a footer length larger than the file, missing
magic bytes and thrift it cannot decode; its errors, and whatever these checks find, become a
`CorruptDataError` naming the file (`tpufeed.sources.parquet.source`).
"""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa

from tpufeed.storage.bounded import malformed, parsing

__all__ = ["check_footer"]

_ARROW_SCHEMA = b"ARROW:schema"


def check_footer(metadata: Any, path: str) -> None:
    """Raises `CorruptDataError` naming `path` and the field where the footer `metadata` (a
    `pyarrow.parquet.FileMetaData`) disagrees with itself."""
    counts = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    negative = next((g for g, n in enumerate(counts) if n < 0), None)
    if negative is not None:
        raise malformed(
            path, f"the footer's row group {negative}", f"holds {counts[negative]} rows"
        )
    if sum(counts) != metadata.num_rows:
        raise malformed(
            path,
            "the footer's row count",
            f"is {metadata.num_rows:,} but its row groups hold {sum(counts):,} rows",
        )
    stored = (metadata.metadata or {}).get(_ARROW_SCHEMA)
    if stored is None:
        return
    with parsing(path, "the footer's Arrow schema (ARROW:schema)"):
        arrow = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored)))
    parquet = metadata.schema.to_arrow_schema()
    if arrow.names != parquet.names:
        raise malformed(
            path,
            "the footer's column names",
            f"{parquet.names} differ from its Arrow schema's {arrow.names}: the footer is damaged",
        )
    for name, said, found in zip(arrow.names, arrow.types, parquet.types):
        if _text(said) != _text(found):
            raise malformed(
                path,
                f"the footer's column {name!r}",
                f"is {found} but its Arrow schema says {said}: the footer is damaged",
            )


def _text(kind: Any) -> bool | None:
    """Whether a column holds text (True) or bytes (False), or None for anything else: the one
    difference between the two schemas that an Arrow reader never makes up itself (the UTF-8
    annotation), where comparing whole types would refuse sound files (a dictionary's value
    type may come back as another width)."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return True
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return False
    return None
