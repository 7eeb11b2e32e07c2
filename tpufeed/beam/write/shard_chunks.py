"""`ShardChunks`: chunks of encoded records in (block, position) order -> shards and a manifest.

The transform that wires the shard build (see `write_shards` for how it works): each chunk is
spilled to a file, the blocks' record counts become their first ranks, each chunk is cut into
spans at shard boundaries, a `WriteShard` step writes each shard from its spans, and
`WriteManifest` writes the manifest once every shard is written.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import AsList, AsSingleton

from tpufeed.beam.write import publish, ranking, shard_files, spill
from tpufeed.beam.write.manifest_writer import WriteManifest
from tpufeed.beam.write.shard_writer import WriteShard
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.built.record_formats import get_record_format
from tpufeed.sources.formats import get_format

__all__ = ["ShardChunks"]


def _block_starts(counts: list[tuple[int, int]], num_shards: int, full: bool) -> dict[str, Any]:
    """{"starts": first rank of each block, "total": records}: the ranks' side input. With
    `full`, refuses more shards than records, before any shard is written."""
    merged: dict[int, int] = {}
    for block, n in counts:
        merged[block] = merged.get(block, 0) + n
    starts, total = ranking.bucket_starts(merged)
    if full and 1 < num_shards > total:
        raise InvalidArgumentError(
            f"--num-shards {num_shards} is more than the {total:,} records this build made "
            f"(after --transform and skips): {num_shards - total:,} shards would be empty. "
            f"Pass --num-shards {max(total, 1)} or fewer, or leave it out (one shard per "
            "~256 MB of input)"
        )
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
    """The shard names of the dataset being replaced: a remote build writes none of them, and
    the switch deletes those the new dataset does not name (`tpufeed.beam.write.publish`)."""
    yield shard_files.old_shard_names(output)


def _block_ranks(spilled: beam.PCollection, num_shards: int, full: bool) -> beam.PCollection:
    """The ranks' side input (see `_block_starts`) from the spilled chunks' record counts."""
    return (
        spilled
        | "BlockSizes" >> beam.Map(lambda chunk: (chunk[0], chunk[3]))
        | "CountBlocks" >> beam.CombinePerKey(sum)
        | "AllBlocks" >> beam.combiners.ToList()
        | "BlockStarts" >> beam.Map(_block_starts, num_shards, full)
    )


class ShardChunks(beam.PTransform):
    """Shards chunks (block, position in block, [record bytes], kinds as bytes) in (block,
    position) order; `info` (a PCollection of dicts) is merged into the manifest's "build"
    entry, and the manifest waits for it: a step that fails there (too many bad records)
    fails the job before the manifest is written. `summaries`, (block, RecordSummary JSON)
    of the codec records, spare the shard writers from decoding every record to summarize it
    (ignored for another record format, whose writer decodes to re-encode anyway). `inputs`,
    one list of {"path", "read", "records"} per input file, goes into the statistics.

    The dataset in `output` stays whole until the new one is complete; then its last step
    switches them (`tpufeed.beam.write.publish`), or with `switch=False` leaves that to the caller
    (`switch_in`, after checking the run; `discard` after a failure). `full_shards=True`
    fails the job, before any shard is written, when there are fewer records than shards."""

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
        inputs: beam.PCollection | None = None,
        switch: bool = True,
        full_shards: bool = False,
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
        self._inputs = inputs
        self._switch = switch
        self._full_shards = full_shards
        self.build_id = uuid.uuid4().hex[:12]

    @property
    def output(self) -> str:
        return self._output

    def count_inputs(self, inputs: beam.PCollection) -> None:
        """Sets `inputs` (see the class) once the caller has made it, before this transform
        is applied."""
        self._inputs = inputs

    def discard(self) -> None:
        """Removes every file this build made (after a failure): the output is as it was."""
        names = [
            shard_files.shard_name(self._prefix, i, self._num_shards, self._format)
            for i in range(self._num_shards)
        ]
        folder = shard_files.shard_dir(
            self._output, self.build_id, names, shard_files.old_shard_names(self._output)
        )
        publish.discard(self._output, self.build_id, [folder + n for n in names])

    def switch_in(self, text: str) -> None:
        """Makes the dataset this build staged (manifest `text`) the output's, for a caller that
        passed `switch=False` and checked the run first."""
        publish.publish(
            self._output, self.build_id, text, shard_files.old_shard_names(self._output)
        )

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        p = chunks.pipeline
        spilled = chunks | "SpillChunks" >> beam.Map(_spill_chunk, self._output, self.build_id)
        ranks = _block_ranks(spilled, self._num_shards, self._full_shards)
        spans = spilled | "SplitChunks" >> beam.ParDo(
            _SplitChunk(self._num_shards), AsSingleton(ranks)
        )
        old = (
            p
            | "Start" >> beam.Create([None])
            | "RemoveOldManifest" >> beam.FlatMap(_old_shards, self._output)
        )
        shards = self._written_shards(spans, ranks, old)
        return self._manifest(shards, old)

    def _written_shards(
        self, spans: beam.PCollection, ranks: beam.PCollection, old: beam.PCollection
    ) -> beam.PCollection:
        """Writes each shard from its spans: the shards' entries."""
        p = spans.pipeline
        ids = p | "ShardIds" >> beam.Create([(i, None) for i in range(self._num_shards)])
        writer = WriteShard(
            self._output,
            self.build_id,
            self._prefix,
            self._num_shards,
            self._format,
            self._options,
            self._record_format,
            self._summaries is None,
        )
        return (
            {"ids": ids, "records": spans}
            | "GroupShards" >> beam.CoGroupByKey()
            | "WriteShard" >> beam.ParDo(writer, AsSingleton(ranks), AsSingleton(old))
            | "DropChunks" >> beam.Map(_drop_chunks)
        )

    def _manifest(self, shards: beam.PCollection, old: beam.PCollection) -> beam.PCollection:
        """The written manifest, once every shard, `info` and the summaries are in."""
        p = shards.pipeline
        info = self._info if self._info is not None else p | "NoInfo" >> beam.Create([{}])
        summaries = (
            self._summaries if self._summaries is not None else p | "NoSummaries" >> beam.Create([])
        )
        inputs = self._inputs if self._inputs is not None else p | "NoInputs" >> beam.Create([])
        finalize = WriteManifest(
            self._output,
            self.build_id,
            self._num_shards,
            self._build,
            self._summaries is not None,
            self._switch,
        )
        return (
            p
            | "Finalize" >> beam.Create([None])
            | "WriteManifest"
            >> beam.ParDo(
                finalize,
                AsList(shards),
                AsList(info),
                AsSingleton(old),
                AsList(summaries),
                AsList(inputs),
            )
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
