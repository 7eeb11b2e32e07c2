"""A record as the build carries it: its bytes and their kind, `CODEC` (a dict in
tpufeed.codec) or `RAW` (bytes written as they are).
"""

from __future__ import annotations

from tpufeed import codec
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.built.record_formats import CODEC as CODEC_FORMAT
from tpufeed.sources.built.record_formats import RecordFormat

__all__ = ["CODEC", "RAW", "encode_record"]

CODEC, RAW = 0, 1  # record kinds: tpufeed.codec bytes of a dict, or raw bytes


def encode_record(
    record: object, where: str, record_format: RecordFormat = CODEC_FORMAT
) -> tuple[bytes, int]:
    """(bytes, kind) of a dict (encoded with tpufeed.codec, after `record_format` checked that
    it can store it) or bytes record (which only the codec record format passes on)."""
    if isinstance(record, dict):
        record_format.check(record, where)
        return codec.encode(record), CODEC
    if isinstance(record, (bytes, bytearray, memoryview)):
        if record_format is not CODEC_FORMAT:
            raise InvalidArgumentError(
                f"{where}: record format {record_format.name!r} stores dict records, got bytes "
                f"({bytes(record)[:40]!r}); bytes are written as they are by the default "
                "record format, codec"
            )
        return bytes(record), RAW
    raise InvalidArgumentError(
        f"{where}: WriteShards writes dicts or bytes, got {type(record).__name__}: {record!r:.80}"
    )
