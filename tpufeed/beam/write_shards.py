"""`WriteShards`: a PCollection of records -> balanced, verified shards and a manifest.

>>> import apache_beam as beam  # doctest: +SKIP
>>> with beam.Pipeline(runner=in_process_runner()) as p:  # doctest: +SKIP
...     (p | beam.Create([{"x": np.arange(3)}, {"x": np.arange(5)}])
...        | tpufeed.beam.WriteShards("/data/ds", num_shards=2, format="array_record"))
>>> tpufeed.Dataset.open("/data/ds").schema["x"]  # doctest: +SKIP

`record_format="tf_example"` stores the dicts as `tf.train.Example` (see
`tpufeed.sources.tf_example_records`), which tf.data (TFRecord shards) and Grain (ArrayRecord
shards, with a parse step) read without tpufeed; `Dataset.open` decodes either kind.

How it works (see `ranking` for the arithmetic): records arrive in *chunks*, (block,
position of the first record in its block, records); blocks are numbered in the dataset's
order. Each chunk is spilled to a file where it is made (`tpufeed.beam.spill`): from there on
the runner carries only (block, position, file, count). The records of each block are
counted, the counts become each block's first rank (prefix sums: one small side input), and a
chunk is cut at shard boundaries into spans of its file, each sent to its shard. A shard's
writer reads its spans in rank order, one chunk at a time, writes the file in place (a local
temporary name renamed in the same folder; a remote object is uploaded under its name), and
yields its summary (count, bytes, CRC32C, schema, lengths). The last step only writes
`manifest.json`: until then the folder holds no manifest, so a failed build leaves nothing
that opens. `WriteShards` makes its blocks from the records' keys: ranges of the content hash
(or, for caller-given order keys, cuts at approximate quantiles), each sorted on one worker.
A shard writer holds one chunk at a time. Dict records travel in tpufeed's codec
(what their order and the schema are computed from), and are stored in the record format when
their shard is written.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsList, AsSingleton

import tpufeed
from tpufeed import codec
from tpufeed.beam import ranking, shard_files, spill
from tpufeed.beam.build_progress import progress
from tpufeed.beam.schema import RecordSummary
from tpufeed.errors import InvalidArgumentError, TpufeedError, plural
from tpufeed.sources.formats import get_format
from tpufeed.sources.manifest import FORMAT, FORMAT_VERSION, MANIFEST_NAME
from tpufeed.sources.record_formats import CODEC as CODEC_FORMAT
from tpufeed.sources.record_formats import RAW_BYTES, RecordFormat, get_record_format

__all__ = ["CODEC", "RAW", "ShardChunks", "WriteShards", "encode_record"]

CODEC, RAW = 0, 1  # record kinds: tpufeed.codec bytes of a dict, or raw bytes
_BUCKETS_PER_SHARD = 4
_NAMESPACE = "tpufeed"
log = logging.getLogger("tpufeed.build")


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


def _keyed_record(
    element: Any, keyed: bool, record_format: RecordFormat
) -> tuple[bytes, tuple[bytes, int]]:
    if keyed:
        if not (isinstance(element, tuple) and len(element) == 2):
            raise InvalidArgumentError(
                f"WriteShards(keyed=True) needs (order key, record) pairs, got {element!r:.80}"
            )
        key, record = element
        data, kind = encode_record(record, f"record with order key {key!r}", record_format)
        return ranking.order_key(key), (data, kind)
    data, kind = encode_record(element, "record", record_format)
    return ranking.content_key(data), (data, kind)


def _hash_bucket(item: tuple[bytes, Any], buckets: int) -> tuple[int, tuple[bytes, Any]]:
    """Content keys are uniform hashes: equal ranges of the key space are balanced blocks."""
    return int.from_bytes(item[0][:8], "big") * buckets >> 64, item


def _quantile_bucket(
    item: tuple[bytes, Any], quantiles: list[bytes]
) -> tuple[int, tuple[bytes, Any]]:
    return ranking.bucket_of(item[0], quantiles[1:-1]), item


def _sorted_chunk(element: tuple[int, Any]) -> tuple[int, int, list[bytes], bytes]:
    """One block of WriteShards: its records sorted by (key, bytes), as one chunk."""
    bucket, items = element
    ordered = sorted(items, key=lambda item: (item[0], item[1][0]))
    return bucket, 0, [data for _, (data, _) in ordered], bytes(kind for _, (_, kind) in ordered)


def _block_starts(counts: list[tuple[int, int]]) -> dict[str, Any]:
    """{"starts": first rank of each block, "total": records}: the ranks' side input."""
    merged: dict[int, int] = {}
    for block, n in counts:
        merged[block] = merged.get(block, 0) + n
    starts, total = ranking.bucket_starts(merged)
    return {"starts": starts, "total": total}


def _spill_chunk(
    chunk: tuple[int, int, list[bytes], bytes], output: str, build_id: str
) -> tuple[int, int, str, int]:
    """Writes a chunk to a file (see `spill`): (block, position, file, records)."""
    block, position, datas, kinds = chunk
    path = spill.chunk_path(output, build_id, block, position)
    spill.write_chunk(path, datas, kinds)
    return block, position, path, len(datas)


class _SplitChunk(beam.DoFn):
    """Cuts a spilled chunk at shard boundaries: (shard, (first rank, file, records in the
    file, start, stop)) for each shard it overlaps."""

    def __init__(self, num_shards: int):
        self._num_shards = num_shards

    def process(
        self, chunk: tuple[int, int, str, int], ranks: dict[str, Any]
    ) -> Iterator[tuple[int, tuple[int, str, int, int, int]]]:
        block, position, path, count = chunk
        total, first = ranks["total"], ranks["starts"][block] + position
        done = 0
        while done < count:
            rank = first + done
            shard = ranking.shard_of(rank, total, self._num_shards)
            shard_end = (shard + 1) * total // self._num_shards
            take = min(count - done, shard_end - rank)
            yield shard, (rank, path, count, done, done + take)
            done += take


def _drop_chunks(shard: dict[str, Any]) -> dict[str, Any]:
    """Deletes the spilled chunks that lie whole in a written shard: no other writer reads
    them, and this step sees only writes the runner kept (a retried writer still finds its
    chunks). Chunks across a shard boundary go with the temporary folder, last. One shard a
    call, in parallel: a single step deleting every chunk would be serial."""
    spill.delete_chunks(shard["whole_chunks"])
    return {k: v for k, v in shard.items() if k != "whole_chunks"}


def _old_shards(_: Any, output: str) -> Iterator[list[str]]:
    """Removes the manifest of a dataset being replaced, before any shard is written, and
    gives the names of its shards (those the new one does not name are deleted last)."""
    names = shard_files.old_shard_names(output)
    shard_files.delete_paths([shard_files.join(output, MANIFEST_NAME)])
    yield names


class _WriteShard(beam.DoFn):
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

    def _stored(
        self, spans: list[tuple[int, str, int, int, int]], summary: RecordSummary, kinds: set[int]
    ) -> Iterator[bytes]:
        for _rank, path, count, start, stop in spans:  # one chunk in memory at a time
            datas, span_kinds = spill.read_chunk(path, count, start, stop)
            kinds.update(set(span_kinds))
            if not self._summarize:  # summarized upstream; the codec bytes are stored as is
                yield from datas
                continue
            for data, kind in zip(datas, span_kinds):
                record = codec.decode(data) if kind == CODEC else None
                if record is not None and self._record_format is not CODEC_FORMAT:
                    data = self._record_format.encode(record)  # the codec bytes are stored as is
                summary.add(record, len(data))
                yield data

    def process(
        self, element: tuple[int, dict[str, list]], ranks: dict[str, Any], _cleared: list[str]
    ) -> Iterator[dict[str, Any]]:
        index, groups = element
        if self._start is None:
            self._start = time.monotonic()
        expected = ranking.shard_sizes(ranks["total"], self._num_shards)[index]
        summary, kinds = RecordSummary(), set[int]()
        name = shard_files.shard_name(self._prefix, index, self._num_shards, self._format)
        spans = sorted(groups["records"], key=lambda span: span[0])
        count, size, crc = shard_files.write_shard_in_place(
            self._output,
            name,
            self._build_id,
            self._stored(spans, summary, kinds),
            self._format,
            self._options,
        )
        if count != expected:
            raise TpufeedError(
                f"{self._output}: shard {name} got {count} records, its rank range "
                f"holds {expected} (the runner lost or repeated records)"
            )
        self._records.inc(count)
        self._bytes.inc(size)
        self._written += 1
        log.info(
            "wrote %s: %s, %s bytes (%s written, %s)",
            name,
            plural(count, "record"),
            f"{size:,}",
            plural(self._written, "shard"),
            progress(self._written, self._num_shards, time.monotonic() - self._start),
        )
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


class _Finalize(beam.DoFn):
    """Merges the shard summaries, deletes the replaced dataset's other shards and writes
    the manifest, last."""

    def __init__(
        self, output: str, build_id: str, num_shards: int, build: dict[str, Any], upstream: bool
    ):
        self._output, self._num_shards, self._build = output, num_shards, build
        self._build_id, self._upstream = build_id, upstream  # summaries from upstream, or shards

    def process(
        self,
        _: Any,
        shards: list[dict],
        infos: list[dict],
        old: list[str],
        summaries: list[tuple[int, dict]],
    ) -> Iterator[dict[str, Any]]:
        shards = sorted(shards, key=lambda s: s["index"])
        if [s["index"] for s in shards] != list(range(self._num_shards)):
            raise TpufeedError(
                f"{self._output}: expected shards 0..{self._num_shards - 1}, got "
                f"{[s['index'] for s in shards]} (a runner bug or a retried step)"
            )
        kinds = set().union(*(s["kinds"] for s in shards))
        if kinds == {CODEC, RAW}:
            raise InvalidArgumentError(
                f"{self._output}: the records are a mix of dicts (tpufeed.codec) and raw bytes; "
                "a dataset holds one kind"
            )
        summary = RecordSummary()
        if not self._upstream:
            summaries = [(s["index"], s["summary"]) for s in shards]
        elif not all(
            isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], dict) for s in summaries
        ):
            raise TpufeedError(
                f"{self._output}: the runner passed other outputs of a step as its "
                "record summaries (it does not keep a step's tagged outputs "
                "apart); build on the in-process runner, Dataflow, Flink or Spark"
            )
        # In the dataset's order, so that the result does not depend on how work was split.
        for _, part in sorted(summaries, key=lambda s: s[0]):
            summary.merge(RecordSummary.from_json(part))
        written = sum(s["num_records"] for s in shards)
        if summary.count != written:
            raise TpufeedError(
                f"{self._output}: the record summaries cover {summary.count} "
                f"records, the shards hold {written} (the runner lost or repeated "
                "a step's outputs); no manifest was written"
            )
        raw = kinds == {RAW}
        build = dict(self._build)
        for info in infos:
            build.update(info)
        records = RAW_BYTES if raw else get_record_format(build["record_format"])
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tpufeed_version": tpufeed.__version__,
            "file_format": build["format"],
            "record_format": records.manifest_name,
            "codec_version": codec.FORMAT_VERSION if records is CODEC_FORMAT else None,
            "num_records": summary.count,
            "shards": [
                {k: s[k] for k in ("path", "num_records", "num_bytes", "crc32c")} for s in shards
            ],
            "schema": None if raw else summary.schema(),
            "statistics": summary.statistics(),
            "build": build,
        }
        # The temporary folder: the chunks across shard boundaries (locally, the whole folder).
        shard_files.remove_partial(self._output, self._build_id)
        shard_files.finalize(self._output, manifest, old)
        yield manifest


class ShardChunks(beam.PTransform):
    """Shards chunks (block, position in block, [record bytes], kinds as bytes) in (block,
    position) order; `info` (a PCollection of dicts) is merged into the manifest's "build"
    entry, and the manifest waits for it: a step that fails there (too many bad records)
    fails the job before the manifest is written. `summaries`, (block, RecordSummary JSON)
    of the codec records, spare the shard writers from decoding every record to summarize it
    (ignored for another record format, whose writer decodes to re-encode anyway)."""

    def __init__(
        self,
        output: str,
        num_shards: int,
        file_format: str,
        *,
        prefix: str = "data",
        writer_options: str = "group_size:1",
        record_format: str = "codec",
        build: dict[str, Any] | None = None,
        info: beam.PCollection | None = None,
        summaries: beam.PCollection | None = None,
    ):
        super().__init__()
        _check_args(output, num_shards, file_format, prefix)
        get_record_format(record_format)
        self._output = output if shard_files.is_remote(output) else os.path.abspath(output)
        self._num_shards, self._format, self._prefix = num_shards, file_format, prefix
        self._options = writer_options if get_format(file_format).writer_options else None
        self._record_format = record_format
        self._build = {
            "num_shards": num_shards,
            "format": file_format,
            "shard_prefix": prefix,
            "writer_options": self._options,
            "record_format": record_format,
            **(build or {}),
        }
        self._info = info
        self._summaries = summaries if record_format == "codec" else None
        self.build_id = uuid.uuid4().hex[:12]

    @property
    def output(self) -> str:
        return self._output

    def remove_partial_files(self) -> None:
        """Removes the local shard files this build left half-written (after a failure)."""
        shard_files.remove_partial(self._output, self.build_id)

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        p = chunks.pipeline
        spilled = chunks | "SpillChunks" >> beam.Map(_spill_chunk, self._output, self.build_id)
        ranks = (
            spilled
            | "BlockSizes" >> beam.Map(lambda chunk: (chunk[0], chunk[3]))
            | "CountBlocks" >> beam.CombinePerKey(sum)
            | "AllBlocks" >> beam.combiners.ToList()
            | "BlockStarts" >> beam.Map(_block_starts)
        )
        spans = spilled | "SplitChunks" >> beam.ParDo(
            _SplitChunk(self._num_shards), AsSingleton(ranks)
        )
        old = (
            p
            | "Start" >> beam.Create([None])
            | "RemoveOldManifest" >> beam.FlatMap(_old_shards, self._output)
        )
        ids = p | "ShardIds" >> beam.Create([(i, None) for i in range(self._num_shards)])
        shards = (
            {"ids": ids, "records": spans}
            | "GroupShards" >> beam.CoGroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                _WriteShard(
                    self._output,
                    self.build_id,
                    self._prefix,
                    self._num_shards,
                    self._format,
                    self._options,
                    self._record_format,
                    self._summaries is None,
                ),
                AsSingleton(ranks),
                AsSingleton(old),
            )
            | "DropChunks" >> beam.Map(_drop_chunks)
        )
        info = self._info if self._info is not None else p | "NoInfo" >> beam.Create([{}])
        summaries = (
            self._summaries if self._summaries is not None else p | "NoSummaries" >> beam.Create([])
        )
        return (
            p
            | "Finalize" >> beam.Create([None])
            | "WriteManifest"
            >> beam.ParDo(
                _Finalize(
                    self._output,
                    self.build_id,
                    self._num_shards,
                    self._build,
                    self._summaries is not None,
                ),
                AsList(shards),
                AsList(info),
                AsSingleton(old),
                AsList(summaries),
            )
        )


class WriteShards(beam.PTransform):
    """Writes a PCollection of dict records (in `record_format`: "codec", tpufeed's, or
    "tf_example", `tf.train.Example`) or bytes as `num_shards` balanced shards plus
    `manifest.json` under `output` (a local folder or gs://...).

    Shard contents depend only on the multiset of records: records are ordered by a hash of
    their bytes, or with `keyed=True` by the order key of `(key, record)` elements (a tuple of
    non-negative ints such as (file, line), or bytes). The output PCollection holds the
    manifest dict once it is written.
    """

    def __init__(
        self,
        output: str,
        num_shards: int,
        format: str = "array_record",
        *,
        keyed: bool = False,
        prefix: str = "data",
        writer_options: str = "group_size:1",
        build_options: dict[str, Any] | None = None,
        record_format: str = "codec",
    ):
        super().__init__()
        self._keyed = keyed
        self._record_format = get_record_format(record_format)
        self._buckets = num_shards * _BUCKETS_PER_SHARD
        self._shard = ShardChunks(
            output,
            num_shards,
            format,
            prefix=prefix,
            writer_options=writer_options,
            record_format=record_format,
            build={"order": "key" if keyed else "content", **(build_options or {})},
        )

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        items = records | "Encode" >> beam.Map(_keyed_record, self._keyed, self._record_format)
        if self._keyed:  # keys of any distribution: cut at approximate quantiles
            quantiles = (
                items
                | "SortKeys" >> beam.Keys()
                | "Quantiles" >> beam.ApproximateQuantiles.Globally(self._buckets + 1)
            )
            bucketed = items | "Bucket" >> beam.Map(_quantile_bucket, AsSingleton(quantiles))
        else:
            bucketed = items | "Bucket" >> beam.Map(_hash_bucket, self._buckets)
        return (
            bucketed
            | "GroupBuckets" >> beam.GroupByKey()
            | "SortBuckets" >> beam.Map(_sorted_chunk)
            | "Shard" >> self._shard
        )


def _check_args(output: object, num_shards: object, file_format: object, prefix: object) -> None:
    if not isinstance(output, str) or not output:
        raise InvalidArgumentError(f"output must be a non-empty path, got {output!r}")
    if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 1:
        raise InvalidArgumentError(f"num_shards must be a positive int, got {num_shards!r}")
    if get_format(file_format).writer is None:
        raise InvalidArgumentError(f"format {file_format!r}: tpufeed does not write it")
    if not isinstance(prefix, str) or not prefix or "/" in prefix or prefix.startswith("."):
        raise InvalidArgumentError(f"prefix must be a plain file name prefix, got {prefix!r}")
