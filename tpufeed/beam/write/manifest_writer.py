"""`WriteManifest`: the build's last step, which checks the written shards and writes
`manifest.json`.

Until this step the output holds what it held before: the new shards are in a staging folder
(or, remotely, under names the old manifest does not use). It merges the shards' record
summaries in the dataset's order, writes the new manifest beside them and, unless the caller
switches the datasets itself after checking the run (`tpufeed build` does), switches them
(`tpufeed.beam.write.publish`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

import tpufeed
from tpufeed import codec
from tpufeed.beam.write import publish, shard_files
from tpufeed.beam.write.record_bytes import CODEC, RAW
from tpufeed.beam.write.schema import RecordSummary
from tpufeed.errors import InvalidArgumentError, TpufeedError
from tpufeed.sources.built.manifest import FORMAT, FORMAT_VERSION
from tpufeed.sources.built.record_formats import CODEC as CODEC_FORMAT
from tpufeed.sources.built.record_formats import RAW_BYTES, get_record_format

__all__ = ["WriteManifest"]


class WriteManifest(beam.DoFn):
    """Merges the shard summaries and writes the manifest, last; with `switch`, then makes
    the new dataset the output's (`tpufeed.beam.write.publish`)."""

    def __init__(
        self,
        output: str,
        build_id: str,
        num_shards: int,
        build: dict[str, Any],
        upstream: bool,
        switch: bool = True,
    ):
        self._output, self._num_shards, self._build = output, num_shards, build
        self._build_id, self._upstream = build_id, upstream  # summaries from upstream, or shards
        self._switch = switch

    def process(
        self,
        _: Any,
        shards: list[dict],
        infos: list[dict],
        old: list[str],
        summaries: list[tuple[int, dict]],
        inputs: list[list[dict[str, Any]]],
    ) -> Iterator[dict[str, Any]]:
        shards = self._every_shard(shards)
        kinds = self._record_kinds(shards)
        summary = self._merged_summary(shards, summaries)
        manifest = self._manifest(shards, kinds == {RAW}, summary, infos)
        manifest["statistics"]["inputs"] = self._input_counts(inputs, summary.count)
        # The temporary folder: the chunks across shard boundaries (locally, the whole folder).
        shard_files.remove_partial(self._output, self._build_id)
        text = shard_files.write_staged_manifest(self._output, self._build_id, manifest)
        if self._switch:
            publish.publish(self._output, self._build_id, text, old)
        yield manifest

    def _every_shard(self, shards: list[dict]) -> list[dict]:
        """The shards' entries in index order, checked to be each shard once."""
        shards = sorted(shards, key=lambda s: s["index"])
        if [s["index"] for s in shards] != list(range(self._num_shards)):
            raise TpufeedError(
                f"{self._output}: expected shards 0..{self._num_shards - 1}, got "
                f"{[s['index'] for s in shards]} (a runner bug or a retried step)"
            )
        return shards

    def _record_kinds(self, shards: list[dict]) -> set[int]:
        """The kinds of the records written: one, since a dataset holds dicts or bytes."""
        kinds = set().union(*(s["kinds"] for s in shards))
        if kinds == {CODEC, RAW}:
            raise InvalidArgumentError(
                f"{self._output}: the records are a mix of dicts (tpufeed.codec) and raw bytes; "
                "a dataset holds one kind"
            )
        return kinds

    def _merged_summary(
        self, shards: list[dict], summaries: list[tuple[int, dict]]
    ) -> RecordSummary:
        """The summary of every record, from upstream's summaries or the shards' own, checked
        to cover exactly the records the shards hold."""
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
        return summary

    def _input_counts(
        self, inputs: list[list[dict[str, Any]]], written: int
    ) -> list[dict[str, Any]] | None:
        """The records of each input file (a build's; None for WriteShards' PCollection),
        checked to add up to the records written."""
        if not inputs:
            return None
        counts = inputs[0]
        if sum(c["records"] for c in counts) != written:
            raise TpufeedError(
                f"{self._output}: the input files' counts add up to "
                f"{sum(c['records'] for c in counts)} records, the shards hold {written} (the "
                "runner lost or repeated a step's outputs); no manifest was written"
            )
        return counts

    def _manifest(
        self, shards: list[dict], raw: bool, summary: RecordSummary, infos: list[dict]
    ) -> dict[str, Any]:
        """The manifest's contents; `infos` are merged into its "build" entry."""
        build = dict(self._build)
        for info in infos:
            build.update(info)
        records = RAW_BYTES if raw else get_record_format(build["record_format"])
        return {
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
