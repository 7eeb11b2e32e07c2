"""ArrayRecord files: the source (`source`), one file's reader (`file`), the record counts read
from footers (`count`, `structure`), the writer (`writer`) and the build's shards (`shard`).

>>> from tpufeed.sources.array_record import write_array_records
"""

from tpufeed.sources.array_record.source import (
    ArrayRecordFile,
    ArrayRecordSource,
    write_array_records,
)

__all__ = ["ArrayRecordFile", "ArrayRecordSource", "write_array_records"]
