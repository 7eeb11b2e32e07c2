"""What the bytes of one record hold: the second axis of a shard, beside its file format.

A built dataset's manifest names its record format, and `Dataset.open` decodes by it:

    ===============  ==================  ===========================================
    option value     manifest value      records are
    ===============  ==================  ===========================================
    codec            tpufeed.codec       dicts in tpufeed's codec (the default)
    tf_example       tf.train.Example    dicts as tf.train.Example (see tf_example_records)
    (bytes records)  bytes               raw bytes, returned as they are
    ===============  ==================  ===========================================

>>> RECORD_FORMATS["tf_example"].manifest_name
'tf.train.Example'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpufeed import codec
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.built.tf_example_records import (
    check_example_record,
    decode_example_record,
    encode_example_record,
)

__all__ = [
    "CODEC",
    "RAW_BYTES",
    "RECORD_FORMATS",
    "TF_EXAMPLE",
    "RecordFormat",
    "get_record_format",
    "manifest_names",
    "record_format_of_manifest",
]


def _no_check(record: dict[str, Any], where: str) -> None:
    """The codec stores every dict that reaches it, and says itself what it cannot."""


@dataclass(frozen=True)
class RecordFormat:
    """`check(record, where)` raises for a dict `encode` cannot store, before any work is done;
    `decode(data, schema)` raises CodecError for bytes it cannot read."""

    name: str
    manifest_name: str
    encode: Callable[[dict[str, Any]], bytes]
    decode: Callable[[bytes, dict[str, Any] | None], Any]
    check: Callable[[dict[str, Any], str], None] = _no_check

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickled by name: a copy is the registry's own object (compared with `is`)."""
        return _by_manifest_name, (self.manifest_name,)


def _decode_codec(data: bytes, schema: dict[str, Any] | None) -> Any:
    return codec.decode(data)


def _as_is(data: bytes, schema: dict[str, Any] | None) -> Any:
    return data


def _no_encoding(record: dict[str, Any]) -> bytes:
    raise InvalidArgumentError(
        "raw bytes records are written as they are; a dict needs a "
        f"record format: one of {sorted(RECORD_FORMATS)}"
    )


CODEC = RecordFormat("codec", "tpufeed.codec", codec.encode, _decode_codec)
TF_EXAMPLE = RecordFormat(
    "tf_example",
    "tf.train.Example",
    encode_example_record,
    decode_example_record,
    check_example_record,
)
RAW_BYTES = RecordFormat("bytes", "bytes", _no_encoding, _as_is)

RECORD_FORMATS: dict[str, RecordFormat] = {f.name: f for f in (CODEC, TF_EXAMPLE)}
_BY_MANIFEST_NAME = {f.manifest_name: f for f in (CODEC, TF_EXAMPLE, RAW_BYTES)}


def _by_manifest_name(name: str) -> RecordFormat:
    return _BY_MANIFEST_NAME[name]


def get_record_format(name: object, option: str = "record_format") -> RecordFormat:
    """The record format dicts are written in, by its option value."""
    fmt = RECORD_FORMATS.get(name) if isinstance(name, str) else None
    if fmt is None:
        raise InvalidArgumentError(
            f"{option} must be one of {sorted(RECORD_FORMATS)}, got {name!r}"
        )
    return fmt


def record_format_of_manifest(value: object) -> RecordFormat | None:
    """The record format a manifest's "record_format" names, or None for an unknown one."""
    return _BY_MANIFEST_NAME.get(value) if isinstance(value, str) else None


def manifest_names() -> list[str]:
    return sorted(_BY_MANIFEST_NAME)
