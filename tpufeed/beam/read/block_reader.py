"""`ReadBlock`: the build's step that reads one block, runs the --transform functions on its
records and encodes them, and sends them on in chunks of (block, position in the block).

Malformed records and failed transforms go to the "bad" output (or stop the build, where no
skips are allowed), each block's (records read, records filtered, file index, records sent)
to "stats", and the codec
records' summary to "summary" (see `bad_records` and `write_shards`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from tpufeed.beam.build_progress import progress
from tpufeed.beam.read.block_plan import Block, BlockStart, file_starts
from tpufeed.beam.read.blocks import count_block, read_block
from tpufeed.beam.read.inputs import Malformed
from tpufeed.beam.read.record_schema import RecordSchema
from tpufeed.beam.read.user_transforms import TransformChain, normalize_record
from tpufeed.beam.write.record_bytes import CODEC, encode_record
from tpufeed.beam.write.schema import RecordSummary
from tpufeed.errors import SourceError, TpufeedError, TransformError, plural
from tpufeed.sources.built.record_formats import CODEC as CODEC_FORMAT
from tpufeed.sources.built.record_formats import RecordFormat

__all__ = ["ReadBlock"]

log = logging.getLogger("tpufeed.build")
_PROGRESS_EVERY_S = 5.0
_CHUNK_RECORDS = 4096  # records of one chunk: few elements for the runner, small to hold
_CHUNK_BYTES = 8 << 20


_ONE_SCHEMA = (
    "; a batch needs every record to have the same keys and kinds of value: make them one "
    "in a --transform"
)


class _Chunk:
    """The encoded records of a block not yet sent on, and the position in the block of the
    first of them (after the last chunk taken, the records sent in all)."""

    def __init__(self, block: int):
        self.block, self.position = block, 0
        self.datas: list[bytes] = []
        self.kinds = bytearray()
        self.size = 0

    def add(self, data: bytes, kind: int) -> None:
        self.datas.append(data)
        self.kinds.append(kind)
        self.size += len(data)

    def full(self) -> bool:
        return len(self.datas) >= _CHUNK_RECORDS or self.size >= _CHUNK_BYTES

    def take(self) -> tuple[int, int, list[bytes], bytes]:
        """(block, position, [bytes], kinds): the chunk as the runner carries it; empties it."""
        chunk = self.block, self.position, self.datas, bytes(self.kinds)
        self.position += len(self.datas)
        self.datas, self.kinds, self.size = [], bytearray(), 0
        return chunk


class _Summary:
    """The summary of a block's codec records, added a chunk at a time (`add_many`)."""

    def __init__(self) -> None:
        self.records = RecordSummary()
        self.pending: list[Any] = []  # the decoded records of the chunk not yet taken

    def take(self, datas: list[bytes]) -> None:
        """Adds the pending records, whose bytes are `datas`."""
        self.records.add_many(self.pending, [len(d) for d in datas])
        self.pending = []


class _Bad(NamedTuple):
    """A record that cannot be written: the message, and the exception where one was raised."""

    message: str
    error: Exception | None
    record: int  # its index in its file


class _Records:
    """The records of a block. Where the build does not count the blocks before reading them
    (`before` given: the blocks before this one in its file), a block's start in its file is
    needed only to name a bad record's line: the block is read as if it began its file, and on
    the first bad record (`exact`) the blocks before it are counted and it is read again from
    its true start, at the same record."""

    def __init__(self, block: Block, start: BlockStart | None, before: tuple[Block, ...]):
        self._block, self._before = block, before
        self.exact = start is not None or not before
        self._items = read_block(block, start or BlockStart())
        self._taken = 0

    def __iter__(self) -> Iterator[tuple[int, str, Any]]:
        return self

    def __next__(self) -> tuple[int, str, Any]:
        item = next(self._items)
        self._taken += 1
        return item

    def exact_record(self) -> tuple[int, str, Any]:
        """The last record again, with its true index and line in its file."""
        counts = {b.id: count_block(b) for b in self._before}
        start = file_starts([*self._before, self._block], counts)[self._block.id]
        self._items = itertools.islice(read_block(self._block, start), self._taken - 1, None)
        self.exact = True
        return next(self._items)


def _by_file(blocks: Sequence[Block]) -> dict[int, tuple[Block, ...]]:
    """{file index: its blocks in order}."""
    files: dict[int, list[Block]] = {}
    for block in blocks:
        files.setdefault(block.file_index, []).append(block)
    return {index: tuple(found) for index, found in files.items()}


class ReadBlock(beam.DoFn):
    """Reads one block, runs the transforms and encodes: chunks (block, position, [bytes],
    kinds); malformed records, failed transforms and records whose schema differs from
    `schema` (the first record's) go to "bad" (or raise, with no skips), and (records read,
    records filtered, file index, records sent) to "stats". Logs each block ("input k of N":
    the blocks this worker read of all), and every few seconds the records done, with this
    worker's share of the input bytes and an ETA.

    `uncounted` are the blocks whose start in their file the build did not count before
    reading (`process` then gets no `starts`): a bad record in one is named after counting
    the blocks before it in its file, on the worker that met it."""

    def __init__(
        self,
        transforms: tuple[str, ...],
        fail_fast: bool,
        record_format: RecordFormat,
        total_bytes: int,
        total_blocks: int,
        schema: RecordSchema | None = None,
        uncounted: Sequence[Block] = (),
    ):
        self._total_blocks, self._schema = total_blocks, schema
        self._files = _by_file(uncounted)
        self._specs, self._fail_fast = transforms, fail_fast
        self._record_format, self._total_bytes = record_format, total_bytes
        self._summarize = record_format is CODEC_FORMAT
        self._read = Metrics.counter("tpufeed", "records_in")
        self._out = Metrics.counter("tpufeed", "records_out")
        self._chain: TransformChain | None = None

    def setup(self) -> None:
        self._chain = TransformChain(self._specs)
        self._blocks = self._bytes_done = self._records_done = 0
        self._start: float | None = None
        self._last_log = time.monotonic()

    def _bad(self, message: str, error: Exception | None, path: str, index: int) -> Any:
        if not self._fail_fast:
            return TaggedOutput("bad", message)
        hint = " (pass --max-bad N to skip up to N bad records)"
        if error is None:
            raise SourceError(f"{message}{hint}", path=path, record=index)
        tb = getattr(error, "traceback_text", None) or ""
        raise TransformError(
            f"{message}{hint}{chr(10) + tb if tb else ''}",
            record=index,
            path=path,
            traceback_text=tb or None,
        ) from error

    def process(self, block: Block, starts: dict[int, BlockStart] | None = None) -> Iterator[Any]:
        """The block's chunks and side outputs; `starts` (each block's start in its file) is
        None where the build did not count the blocks first (see `uncounted`)."""
        if self._chain is None:
            raise TpufeedError("the transforms are loaded by setup(), which Beam calls first")
        if self._start is None:
            self._start = time.monotonic()
        chunk = _Chunk(block.id)
        summary = _Summary() if self._summarize else None
        read = filtered = 0
        same_file = () if starts is not None else self._files.get(block.file_index, ())
        before = tuple(b for b in same_file if b.id < block.id)
        records = _Records(block, None if starts is None else starts[block.id], before)
        for item in records:
            read += 1
            encoded = self._encoded(self._chain, block, *item)
            if isinstance(encoded, _Bad) and not records.exact:
                encoded = self._encoded(self._chain, block, *records.exact_record())
            if isinstance(encoded, _Bad):
                yield self._bad(encoded.message, encoded.error, block.path, encoded.record)
                continue
            filtered += not encoded
            for data, kind, out in encoded:
                if summary is not None:
                    summary.pending.append(out if kind == CODEC else None)
                chunk.add(data, kind)
            if chunk.full():
                if summary is not None:
                    summary.take(chunk.datas)
                yield chunk.take()
            self._log_progress(read)
        if chunk.datas:
            if summary is not None:
                summary.take(chunk.datas)
            yield chunk.take()
        records_summary = None if summary is None else summary.records
        yield from self._block_done(block, read, filtered, chunk.position, records_summary)

    def _encoded(
        self, chain: TransformChain, block: Block, index: int, origin: str, record: Any
    ) -> list[tuple[bytes, int, Any]] | _Bad:
        """(bytes, kind, record) of each record the transforms make of `record` (none where
        they filter it out), or why it cannot be written."""
        if isinstance(record, Malformed):
            return _Bad(str(record), None, index)
        try:
            outputs = [normalize_record(r) for r in chain(record, block.file_index, index)]
            if self._schema is not None:
                for out in outputs:
                    differs = self._schema.mismatch(out)
                    if differs is not None:
                        return _Bad(f"{origin}: {differs}{_ONE_SCHEMA}", None, index)
            return [(*encode_record(r, origin, self._record_format), r) for r in outputs]
        except Exception as e:  # noqa: BLE001 - user data and functions may raise anything
            return _Bad(f"{origin}: {e}", e, index)

    def _block_done(
        self, block: Block, read: int, filtered: int, sent: int, summary: RecordSummary | None
    ) -> Iterator[Any]:
        """The block's counts and summary, on the side outputs; logs the block read."""
        self._read.inc(read)
        self._out.inc(sent)
        yield TaggedOutput("stats", (read, filtered, block.file_index, sent))
        if summary is not None:
            yield TaggedOutput("summary", (block.id, summary.to_json()))
        self._blocks += 1
        self._records_done += read
        self._bytes_done += block.size
        log.info(
            "read %s: %s (input %d of %d; %s)",
            block.describe(),
            plural(read, "record"),
            self._blocks,
            self._total_blocks,
            self._share(),
        )

    def _share(self) -> str:
        return progress(
            self._bytes_done,
            self._total_bytes,
            time.monotonic() - (self._start or 0),
            " of the input bytes",
        )

    def _log_progress(self, read: int) -> None:
        now = time.monotonic()
        if now - self._last_log >= _PROGRESS_EVERY_S:
            self._last_log = now
            log.info("processed %s records (this worker)", f"{self._records_done + read:,}")
