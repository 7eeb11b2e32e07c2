"""`tpufeed inspect`: what is in a set of record files."""

from __future__ import annotations

import numpy as np

from tpufeed import codec
from tpufeed.errors import CodecError, InvalidArgumentError
from tpufeed.storage.local import expand_paths


def open_source(paths: list[str], fmt: str | None):
    files = expand_paths(paths)
    fmt = fmt or _format_of(files[0])
    if fmt == "array_record":
        from tpufeed.sources.array_record import ArrayRecordSource
        return ArrayRecordSource(files)
    from tpufeed.sources.tfrecord import TFRecordSource
    return TFRecordSource(files)


def describe(paths: list[str], fmt: str | None = None) -> str:
    source = open_source(paths, fmt)
    lines = [f"{len(source.files)} files, {len(source):,} records"]
    lines += [f"  {f.path}: {len(f):,} records" for f in source.files]
    if len(source):
        record = source[0]
        lines.append(f"record 0: {len(record):,} bytes")
        try:
            decoded = codec.decode(record)
        except CodecError:
            lines.append(f"  raw bytes: {record[:64]!r}{'...' if len(record) > 64 else ''}")
        else:
            for key, value in decoded.items():
                if isinstance(value, np.ndarray):
                    lines.append(f"  {key}: {value.dtype}{list(value.shape)}")
                else:
                    lines.append(f"  {key}: {type(value).__name__} = {value!r:.60}")
    return "\n".join(lines)


def _format_of(path: str) -> str:
    if ".array_record" in path or path.endswith(".ar"):
        return "array_record"
    if ".tfrecord" in path or path.endswith(".tfr"):
        return "tfrecord"
    raise InvalidArgumentError(f"cannot tell the format of {path}; pass --format")
