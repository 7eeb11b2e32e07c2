"""`cache(directory, max_bytes)`: each record's output of the stages before it, made once.

The first time a record is read (or whenever its entry is missing or damaged) the source is
read and the stages before `cache()` run on it, and their outputs are stored in `directory`
(`tpufeed.storage.record_cache`); later epochs read them back instead. The stages after it
still draw their numbers per (seed, epoch, record), so every epoch is what the pipeline makes
without the cache. Only deterministic stages may come before it: `map`, `filter`, `flat_map`.

Entries are keyed by what made them: the source (each file's whole identity, inode included,
or an in-memory source's contents) and what every stage before `cache()` computes: its code,
settings and captured values, the module-level values its code reads, and the user's functions
and classes it reaches in any of their modules (`function_identity`). Any change makes new
entries; a value that cannot be keyed is refused when the pipeline is built. `cache(...,
key="v2")` stands for the code instead (not followed): the user changes it when the code
changes. The key is not part of the pipeline's fingerprint: a state taken with or without
`cache()` resumes in the other.

An entry holds the record's outputs in order, each encoded by `tpufeed.codec` (a dict of
arrays, bytes, str and numbers, or one such value), with its piece id after a `flat_map`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tpufeed import codec
from tpufeed.errors import CodecError, InvalidArgumentError
from tpufeed.ops.base import Context, Elements, RecordStage, now
from tpufeed.ops.function_identity import function_identity
from tpufeed.storage.record_cache import RecordFiles

__all__ = ["Cache", "cache_key"]

log = logging.getLogger("tpufeed.cache")

_COUNT = struct.Struct("<I")
_OUTPUT = struct.Struct("<QBIQ")  # piece id, bare value, scalar keys' length, codec length
_ALIGN = 16  # each codec payload starts here, so arrays decode as views of the entry
_BARE = ""  # the key a value that is not a dict is stored under
_KEY_FORMAT = 2  # what the key is made of: entries keyed another way are never read
Made = Callable[[list[int]], Elements]  # chunk units -> their elements, read and made


@dataclass(frozen=True)
class Cache(RecordStage):
    """Where the stages before it are replayed from; `pieces`: they split records (flat_map)."""

    files: RecordFiles
    pieces: bool
    kind: ClassVar[str] = "cache"

    @property
    def name(self) -> str:
        return "cache"

    def apply_all(self, elements: Elements, context: Context) -> Elements:
        return elements  # outside a chunk runner (lookups, element_spec): the stages ran

    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        return [value]

    def replay(self, context: Context, label: str, make: Made) -> Elements:
        """The elements of the chunk's records: stored ones read back, the others made by
        `make` (the read and the stages before the cache) and stored, timed under `label`."""
        started, records = now(), context.records
        outputs: dict[int, list[tuple[Any, int]]] = {}
        for unit, record in enumerate(records):
            found = self._read(record)
            if found is not None:
                outputs[unit] = found
        missing = [unit for unit in range(len(records)) if unit not in outputs]
        spent = now() - started
        if missing:
            skipped = context.skipped if context.skipped is not None else []
            before = len(skipped)
            made = _by_unit(make(missing))
            started = now()
            failed = {getattr(error, "record", None) for error in skipped[before:]}  # no entry
            entries = [
                (records[unit], self._encode(made.get(unit, []), records[unit], context))
                for unit in missing
                if records[unit] not in failed
            ]
            self.files.put(entries)
            outputs.update(made)
            spent += now() - started
        context.clock.add(label, spent, len(records))
        return _elements(outputs, len(records), self.pieces)

    def _read(self, record: int) -> list[tuple[Any, int]] | None:
        payload = self.files.get(record)
        if payload is None:
            return None
        try:
            return _decode(payload)
        except (CodecError, struct.error, ValueError) as error:  # a sound file, not an entry
            log.warning("tpufeed cache: record %d's entry does not decode (%s)", record, error)
            return None

    def _encode(self, outputs: list[tuple[Any, int]], record: int, context: Context) -> bytes:
        try:
            return _encode(outputs)
        except (CodecError, TypeError, ValueError, OverflowError) as error:
            raise InvalidArgumentError(
                f"cache() cannot store the output made of {context.names.describe(record)}: "
                f"{error}. It stores what tpufeed.codec encodes: a dict of numpy arrays, bytes, "
                "str, int, float and bool, or one such value; make the stage before cache() "
                "return that (a dict instead of a tuple), or put cache() earlier"
            ) from None


def cache_key(source: Any, stages: Sequence[RecordStage], key: str | None = None) -> str:
    """Names what makes the entries: the source's files (their whole identity) or contents,
    and what the stages compute (`function_identity`), or the user's `key` in its place."""
    versions = list(source.file_versions())
    content = "" if versions else _content_digest(source.source, key)
    parts = [_KEY_FORMAT, source.fingerprint(), versions, content, key]
    digest = hashlib.blake2b(json.dumps(parts).encode(), digest_size=16)
    for stage in stages:
        digest.update(stage.kind.encode() + b"\0")
        if key is None:  # the user's key stands for the code: it is not followed
            digest.update(function_identity(stage.fn, stage.name))
    return digest.hexdigest()


def _content_digest(source: Any, key: str | None) -> str:
    """A source without files is known by what it says its contents are (`content_identity()`),
    or by its pickled contents (an in-memory sequence). One that gives neither cannot be told
    from itself with other data: the user's `key` stands for it, or it is refused, as a cache
    replayed for changed data is wrong data."""
    identity = getattr(source, "content_identity", None)
    if callable(identity):
        return hashlib.blake2b(identity(), digest_size=16).hexdigest()
    try:
        return hashlib.blake2b(pickle.dumps(source, protocol=5), digest_size=16).hexdigest()
    except Exception as error:  # noqa: BLE001 - whatever pickling raises, the source is unkeyed
        if key is not None:
            return ""
        raise InvalidArgumentError(
            f"cache() cannot tell when the data of {type(source).__qualname__} changes: it has "
            f"no files, and it cannot be pickled to key the cache by its contents "
            f"({type(error).__name__}: {error}). Give the source a content_identity() method "
            "that returns bytes which change with its data, or pass cache(..., key='...') and "
            "change the key whenever the data changes"
        ) from None


def _by_unit(elements: Elements) -> dict[int, list[tuple[Any, int]]]:
    ids = elements.ids if elements.ids is not None else [0] * len(elements.values)
    out: dict[int, list[tuple[Any, int]]] = {}
    for value, unit, piece in zip(elements.values, elements.units, ids):
        out.setdefault(unit, []).append((value, piece))
    return out


def _elements(outputs: dict[int, list[tuple[Any, int]]], count: int, pieces: bool) -> Elements:
    values: list[Any] = []
    units: list[int] = []
    ids: list[int] = []
    for unit in range(count):
        for value, piece in outputs.get(unit, ()):
            values.append(value)
            units.append(unit)
            ids.append(piece)
    return Elements(values, units, ids if pieces else None)


def _encode(outputs: list[tuple[Any, int]]) -> bytes:
    parts = [_COUNT.pack(len(outputs))]
    size = _COUNT.size
    for value, piece in outputs:
        bare = not isinstance(value, dict)
        record = {_BARE: value} if bare else value
        scalars = b"".join(
            k.encode() + b"\0" for k, v in record.items() if isinstance(v, np.generic)
        )
        body = codec.encode(record)
        head = _OUTPUT.pack(piece, bare, len(scalars), len(body)) + scalars
        size += len(head)
        pad = b"\0" * (-size % _ALIGN)
        parts += [head, pad, body]
        size += len(pad) + len(body)
    return b"".join(parts)


def _decode(payload: bytearray) -> list[tuple[Any, int]]:
    view = memoryview(payload)
    (count,) = _COUNT.unpack_from(view)
    pos, outputs = _COUNT.size, []
    for _ in range(count):
        piece, bare, scalar_bytes, length = _OUTPUT.unpack_from(view, pos)
        pos += _OUTPUT.size
        scalars = bytes(view[pos : pos + scalar_bytes]).decode().split("\0")[:-1]
        pos += scalar_bytes
        pos += -pos % _ALIGN
        if pos + length > len(view):
            raise ValueError(f"an output of {length} bytes at {pos} runs past the entry")
        record = codec.decode(view[pos : pos + length])
        pos += length
        for key in scalars:
            record[key] = record[key][()]  # a numpy scalar, as it was made
        outputs.append((record[_BARE] if bare else record, piece))
    return outputs
