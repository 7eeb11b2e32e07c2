"""`WriteShard`: the step that writes one shard from its spans of spilled chunks, in place.

A shard's spans arrive grouped by its index; the writer reads them in rank order, one chunk at
a time (see `spill`), stores each record in the record format, writes the file under its final
name in the new dataset (see `shard_files.write_shard_in_place`: never a file of the dataset
being replaced) and yields the shard's manifest entry and summary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from tpufeed import codec
from tpufeed.beam.build_progress import progress
from tpufeed.beam.write import ranking, shard_files, spill
from tpufeed.beam.write.record_bytes import CODEC
from tpufeed.beam.write.schema import RecordSummary
from tpufeed.errors import TpufeedError, plural
from tpufeed.sources.built.record_formats import CODEC as CODEC_FORMAT
from tpufeed.sources.built.record_formats import get_record_format

__all__ = ["WriteShard"]

_NAMESPACE = "tpufeed"
log = logging.getLogger("tpufeed.build")


class WriteShard(beam.DoFn):
    """Writes one shard in place; yields its manifest entry and summary. Logs each shard
    written, with the shards this worker wrote so far and an ETA."""

    def __init__(
        self,
        output: str,
        build_id: str,
        prefix: str,
        num_shards: int,
        file_format: str,
        options: str | None,
        record_format: str,
        summarize: bool,
    ):
        self._output, self._build_id, self._prefix = output, build_id, prefix
        self._summarize = summarize
        self._num_shards, self._format, self._options = num_shards, file_format, options
        self._record_format = get_record_format(record_format)
        self._records = Metrics.counter(_NAMESPACE, "records_written")
        self._bytes = Metrics.counter(_NAMESPACE, "bytes_written")

    def setup(self) -> None:
        self._written = 0
        self._start: float | None = None
        self._dir: str | None = None  # the shards' folder, from the first shard's side input

    def _stored(
        self, spans: list[tuple[int, str, int, int, int]], summary: RecordSummary, kinds: set[int]
    ) -> Iterator[bytes]:
        for _rank, path, count, start, stop in spans:  # one chunk in memory at a time
            datas, span_kinds = spill.read_chunk(path, count, start, stop)
            kinds.update(set(span_kinds))
            if not self._summarize:  # summarized upstream; the codec bytes are stored as is
                yield from datas
                continue
            records = [
                codec.decode(data) if kind == CODEC else None
                for data, kind in zip(datas, span_kinds)
            ]
            if self._record_format is not CODEC_FORMAT:  # the codec bytes are stored as is
                encode = self._record_format.encode
                datas = [data if r is None else encode(r) for data, r in zip(datas, records)]
            summary.add_many(records, [len(data) for data in datas])  # a chunk at a time
            yield from datas

    def process(
        self, element: tuple[int, dict[str, list]], ranks: dict[str, Any], old_names: list[str]
    ) -> Iterator[dict[str, Any]]:
        index, groups = element
        if self._start is None:
            self._start = time.monotonic()
        expected = ranking.shard_sizes(ranks["total"], self._num_shards)[index]
        summary, kinds = RecordSummary(), set[int]()
        name = self._folder(old_names) + shard_files.shard_name(
            self._prefix, index, self._num_shards, self._format
        )
        spans = sorted(groups["records"], key=lambda span: span[0])
        count, size, crc = shard_files.write_shard_in_place(
            self._output,
            name,
            self._build_id,
            self._stored(spans, summary, kinds),
            self._format,
            self._options,
        )
        self._check_count(name, count, expected)
        self._note_written(name, count, size, self._start)
        yield {
            "index": index,
            "path": name,
            "num_records": count,
            "num_bytes": size,
            "crc32c": crc,
            "kinds": sorted(kinds),
            "summary": summary.to_json(),
            "whole_chunks": [path for _, path, n, start, stop in spans if start == 0 and stop == n],
        }

    def _folder(self, old_names: list[str]) -> str:
        """The shards' folder in the dataset: the same for every shard of the build."""
        if self._dir is None:
            names = [
                shard_files.shard_name(self._prefix, i, self._num_shards, self._format)
                for i in range(self._num_shards)
            ]
            self._dir = shard_files.shard_dir(self._output, self._build_id, names, old_names)
        return self._dir

    def _check_count(self, name: str, count: int, expected: int) -> None:
        """A shard holds exactly its rank range: anything else is records lost or repeated."""
        if count != expected:
            raise TpufeedError(
                f"{self._output}: shard {name} got {count} records, its rank range "
                f"holds {expected} (the runner lost or repeated records)"
            )

    def _note_written(self, name: str, count: int, size: int, start: float) -> None:
        """Counts a written shard in the step's metrics and logs it, with an ETA from `start`,
        when this worker began its first shard."""
        self._records.inc(count)
        self._bytes.inc(size)
        self._written += 1
        log.info(
            "wrote %s: %s, %s bytes (%s written, %s)",
            name,
            plural(count, "record"),
            f"{size:,}",
            plural(self._written, "shard"),
            progress(self._written, self._num_shards, time.monotonic() - start),
        )
