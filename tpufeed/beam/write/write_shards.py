"""`WriteShards`: a PCollection of records -> balanced, verified shards and a manifest.

>>> import apache_beam as beam  # doctest: +SKIP
>>> with beam.Pipeline(runner=in_process_runner()) as p:  # doctest: +SKIP
...     (p | beam.Create([{"x": np.arange(3)}, {"x": np.arange(5)}])
...        | tpufeed.beam.WriteShards("/data/ds", num_shards=2, format="array_record"))
>>> tpufeed.Dataset.open("/data/ds").schema["x"]  # doctest: +SKIP

`record_format="tf_example"` stores the dicts as `tf.train.Example` (see
`tpufeed.sources.built.tf_example_records`), which tf.data (TFRecord shards) and Grain (ArrayRecord
shards, with a parse step) read without tpufeed; `Dataset.open` decodes either kind.

How it works (see `ranking` for the arithmetic): records arrive in *chunks*, (block,
position of the first record in its block, records); blocks are numbered in the dataset's
order. Each chunk is spilled to a file where it is made (`tpufeed.beam.write.spill`): from there on
the runner carries only (block, position, file, count). The records of each block are
counted, the counts become each block's first rank (prefix sums: one small side input), and a
chunk is cut at shard boundaries into spans of its file, each sent to its shard. A shard's
writer reads its spans in rank order, one chunk at a time, writes the file in place (a local
temporary name renamed in the same folder; a remote object is uploaded under its name), and
yields its summary (count, bytes, CRC32C, schema, lengths). The last step only writes
`manifest.json`: until then the folder holds no manifest, so a failed build leaves nothing
that opens. `WriteShards` makes its blocks from the records' keys: ranges of the content hash
(or, for caller-given order keys, cuts at evenly spaced keys of a sample: `key_cuts`), each
sorted on one worker.
A shard writer holds one chunk at a time. Dict records travel in tpufeed's codec
(what their order and the schema are computed from), and are stored in the record format when
their shard is written.

The steps live in modules of their own: `shard_chunks` wires them (`ShardChunks`, from chunks
on), `shard_writer` writes a shard (`WriteShard`), `manifest_writer` the manifest
(`WriteManifest`), and `record_bytes` says what a record's bytes hold.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import AsSingleton

from tpufeed.beam.write import key_cuts, ranking
from tpufeed.beam.write.record_bytes import CODEC, RAW, encode_record
from tpufeed.beam.write.shard_chunks import ShardChunks
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.built.record_formats import RecordFormat, get_record_format

__all__ = ["CODEC", "RAW", "ShardChunks", "WriteShards", "encode_record"]

_BUCKETS_PER_SHARD = 4


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


def _source_of(element: Any, field: str, keyed: bool) -> str:
    """The name of the source a record came from: its `field` (str, bytes, or an integer)."""
    record = element[1] if keyed and isinstance(element, tuple) and len(element) == 2 else element
    value = record.get(field) if isinstance(record, dict) else None
    if isinstance(value, np.ndarray) and value.ndim == 0 or isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise InvalidArgumentError(
        f"WriteShards(source_field={field!r}): each record names its source in its {field!r} "
        f"field (a str, bytes or int); got {record!r:.80}"
    )


def _source_counts(counts: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The statistics' "inputs": each source's records, by name."""
    return [{"path": name, "read": n, "records": n} for name, n in sorted(counts)]


def _hash_bucket(item: tuple[bytes, Any], buckets: int) -> tuple[int, tuple[bytes, Any]]:
    """Content keys are uniform hashes: equal ranges of the key space are balanced blocks."""
    return int.from_bytes(item[0][:8], "big") * buckets >> 64, item


def _key_bucket(item: tuple[bytes, Any], cuts: list[bytes]) -> tuple[int, tuple[bytes, Any]]:
    return ranking.bucket_of(item[0], cuts), item


def _sorted_chunk(element: tuple[int, Any]) -> tuple[int, int, list[bytes], bytes]:
    """One block of WriteShards: its records sorted by (key, bytes), as one chunk."""
    bucket, items = element
    ordered = sorted(items, key=lambda item: (item[0], item[1][0]))
    return bucket, 0, [data for _, (data, _) in ordered], bytes(kind for _, (_, kind) in ordered)


class WriteShards(beam.PTransform):
    """Writes a PCollection of dict records (in `record_format`: "codec", tpufeed's, or
    "tf_example", `tf.train.Example`) or bytes as `num_shards` balanced shards plus
    `manifest.json` under `output` (a local folder or gs://...).

    Shard contents depend only on the multiset of records: records are ordered by a hash of
    their bytes, or with `keyed=True` by the order key of `(key, record)` elements (a tuple of
    non-negative ints such as (file, line), or bytes). The output PCollection holds the
    manifest dict once it is written.

    `source_field` names a field of the dict records that names the source each came from
    (its input file, its corpus): the manifest's statistics then count each source's
    records, as `tpufeed build` counts its input files' (`Dataset.statistics.inputs`).
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
        source_field: str | None = None,
    ):
        super().__init__()
        if source_field is not None and (not isinstance(source_field, str) or not source_field):
            raise InvalidArgumentError(
                f"WriteShards source_field must be a field name or None, got {source_field!r}"
            )
        self._keyed, self._source_field = keyed, source_field
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
        if self._source_field is not None:  # one name a record, counted in the same pass
            self._shard.count_inputs(
                records
                | "SourceOf" >> beam.Map(_source_of, self._source_field, self._keyed)
                | "CountSources" >> beam.combiners.Count.PerElement()
                | "AllSources" >> beam.combiners.ToList()
                | "SourceCounts" >> beam.Map(_source_counts)
            )
        items = records | "Encode" >> beam.Map(_keyed_record, self._keyed, self._record_format)
        if self._keyed:  # keys of any distribution: cut at a sample's evenly spaced keys
            keys = items | "SortKeys" >> beam.Keys()
            every = (
                keys
                | "CountKeys" >> beam.combiners.Count.Globally()
                | "SampleRate" >> beam.Map(key_cuts.sample_every, self._buckets)
            )
            cuts = (
                keys
                | "SampleKeys" >> beam.Filter(key_cuts.in_sample, AsSingleton(every))
                | "AllSampled" >> beam.combiners.ToList()
                | "CutPoints" >> beam.Map(key_cuts.cut_points, self._buckets)
            )
            bucketed = items | "Bucket" >> beam.Map(_key_bucket, AsSingleton(cuts))
        else:
            bucketed = items | "Bucket" >> beam.Map(_hash_bucket, self._buckets)
        return (
            bucketed
            | "GroupBuckets" >> beam.GroupByKey()
            | "SortBuckets" >> beam.Map(_sorted_chunk)
            | "Shard" >> self._shard
        )
