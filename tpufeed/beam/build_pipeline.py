"""The `tpufeed build` pipeline: raw inputs -> blocks -> --transform functions -> shards.

Records keep their input order. The inputs are cut into deterministic blocks (see `block_plan`);
a worker reads one block, runs the transforms and encodes, and sends the records on in chunks
that carry (block, position in the block). The blocks' record counts become each block's first
rank (prefix sums, one small side input), so rank = block start + position, and shards are
contiguous runs of that order, balanced within one record (see `write_shards`). No step sees
every record on one key, and the result depends on the inputs alone, never on bundles or
workers. A malformed input record or a transform that raises stops the build with an error
naming the file and line, unless `max_bad` allows skipping it; skips are counted, listed in
the manifest, and more than `max_bad` of them fail the build before the manifest is written.

This module wires the build's steps and runs them; the steps live beside it: `build_config`
(what to build), `build_plan` (its blocks, shards and workers), `block_reader` (reading a
block), `bad_records` (the skips and their limit), `shard_chunks` (the shards and the
manifest) and `build_failures` (a run that stops). `build_launch.build` plans, starts the
workers and calls `run_build`.

>>> run_build(config, plan_build(config))  # doctest: +SKIP
{'records_in': 1000, 'records_out': 1000, 'skipped': 0, 'filtered': 0, 'shards': 4, ...}
"""

from __future__ import annotations

import json
import logging
import re
import signal
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pvalue import AsSingleton, DoOutputsTuple
from apache_beam.runners.runner import PipelineResult

from tpufeed import errors
from tpufeed.beam.build_failures import (
    Terminated,
    disk_failure,
    lost_worker,
    noting_interrupts,
    os_error_in,
)
from tpufeed.beam.build_runner import check_counts, runner_for, worker_args
from tpufeed.beam.construction import no_ipython_probe, quick_options
from tpufeed.beam.plan.build_config import BuildConfig
from tpufeed.beam.plan.build_plan import BuildPlan
from tpufeed.beam.read.bad_records import (
    BadRecords,
    CheckBad,
    add_pairs,
    input_counts,
    sum_stats,
)
from tpufeed.beam.read.block_plan import Block, BlockStart, file_starts, needs_count
from tpufeed.beam.read.block_reader import ReadBlock
from tpufeed.beam.read.blocks import count_block
from tpufeed.beam.read.record_schema import first_record_schema
from tpufeed.beam.workers.worker_check import check_workers, needs_check
from tpufeed.beam.workers.worker_count import AUTO
from tpufeed.beam.write import shard_files
from tpufeed.beam.write.shard_chunks import ShardChunks
from tpufeed.errors import InvalidArgumentError, TpufeedError, plural
from tpufeed.sources.built.record_formats import get_record_format

__all__ = ["BuildConfig", "run_build"]

log = logging.getLogger("tpufeed.build")


def _block_starts(
    counts: list[tuple[int, tuple[int, int]]], blocks: list[Block]
) -> dict[int, BlockStart]:
    known = {b.id: (b.count, 0) for b in blocks if b.count is not None}
    return file_starts(blocks, {**known, **dict(counts)})


def _pipeline_parts(
    p: beam.Pipeline, config: BuildConfig, blocks: list[Block], num_shards: int
) -> ShardChunks:
    to_count = _to_count(blocks)
    if config.transforms or any(b.kind != "jsonl" for b in to_count):
        read = _read_blocks(p, config, blocks, _file_starts(p, blocks, to_count))
    else:  # only messages name lines: counted where a bad record needs one (see ReadBlock)
        read = _read_blocks(p, config, blocks, None, uncounted=to_count)
    info = _checked_counts(p, config.max_bad, read)
    writer = ShardChunks(
        config.output,
        num_shards,
        config.file_format,
        record_format=config.record_format,
        build={
            "order": "input",
            "inputs": list(config.inputs),
            "transforms": list(config.transforms),
            "max_bad": config.max_bad,
            **_classes(blocks),
        },
        info=info,
        summaries=read.summary,
        inputs=_input_counts(read, blocks),
        switch=False,  # build() switches the datasets once it has checked the run's counts
        full_shards=config.num_shards is not None,
    )
    read.chunks | "WriteShards" >> writer
    return writer


def _input_counts(read: DoOutputsTuple, blocks: list[Block]) -> beam.PCollection:
    """One list of each input file's (path, records read, records written), from the blocks'
    counts: the statistics' "inputs"."""
    paths = {b.file_index: b.path for b in blocks}
    return (
        read.stats
        | "InputPairs" >> beam.Map(lambda s: (s[2], (s[0], s[3])))
        | "CountInputs" >> beam.CombinePerKey(add_pairs)
        | "AllInputs" >> beam.combiners.ToList()
        | "InputCounts" >> beam.Map(input_counts, paths)
    )


def _classes(blocks: list[Block]) -> dict[str, Any]:
    """{"classes": [class folder names]} for a build of image folders with class folders, the
    names in the order of their `label`s (per folder, {folder: names}, where they differ)."""
    by_folder = {b.path: list(b.classes) for b in blocks if b.classes is not None}
    names = list(by_folder.values())
    if not names:
        return {}
    return {"classes": names[0] if all(n == names[0] for n in names) else by_folder}


def _to_count(blocks: list[Block]) -> list[Block]:
    """The blocks whose records and lines a later block of their file needs to know where it
    starts, and that the plan does not know."""
    return [
        b
        for b, after in zip(blocks, blocks[1:] + [None])
        if b.count is None and needs_count(b, after)
    ]


def _file_starts(p: beam.Pipeline, blocks: list[Block], to_count: list[Block]) -> beam.PCollection:
    """Where each block starts in its file, from the counts of `to_count`: one small side
    input, before any block is read. A --transform's per-record randomness needs it."""
    return (
        p
        | "BlocksToCount" >> beam.Create(to_count)
        | "CountBlock" >> beam.Map(lambda b: (b.id, count_block(b)))
        | "AllCounts" >> beam.combiners.ToList()
        | "FileStarts" >> beam.Map(_block_starts, blocks)
    )


def _read_blocks(
    p: beam.Pipeline,
    config: BuildConfig,
    blocks: list[Block],
    starts: beam.PCollection | None,
    uncounted: list[Block] | None = None,
) -> DoOutputsTuple:
    """Every block read, transformed and encoded: the chunks, and the "bad", "stats" and
    "summary" outputs beside them; `starts` None reads `uncounted` blocks without their
    starts."""
    reader = ReadBlock(
        config.transforms,
        config.max_bad == 0,
        get_record_format(config.record_format),
        sum(b.size for b in blocks),
        len(blocks),
        first_record_schema(blocks, config.transforms),
        uncounted=uncounted or (),
    )
    step = beam.ParDo(reader) if starts is None else beam.ParDo(reader, AsSingleton(starts))
    return (
        p
        | "Blocks" >> beam.Create(blocks)
        | "ReadBlock" >> step.with_outputs("bad", "stats", "summary", main="chunks")
    )


def _checked_counts(p: beam.Pipeline, max_bad: int, read: DoOutputsTuple) -> beam.PCollection:
    """The build's counts for the manifest, from a step that fails the job when the bad
    records are more than `max_bad`."""
    bad = read.bad | "CountBad" >> beam.CombineGlobally(BadRecords())
    stats = read.stats | "CountRead" >> beam.CombineGlobally(sum_stats)
    return (
        p
        | "Check" >> beam.Create([None])
        | "CheckBad" >> beam.ParDo(CheckBad(max_bad), AsSingleton(stats), AsSingleton(bad))
    )


def run_build(
    config: BuildConfig, plan: BuildPlan, worker_command: str | None = None
) -> dict[str, Any]:
    """Runs the planned build (`tpufeed.beam.build_launch.build` plans it and may start its
    workers, whose command is then `worker_command`) and returns its summary (records in/out,
    skipped, shards, bytes).

    The dataset already in `config.output` stays whole until the new one is complete and its
    counts are checked; then one switch replaces it (`tpufeed.beam.write.publish`). A build that
    fails or is stopped (Ctrl-C raises KeyboardInterrupt) removes what it wrote and leaves the
    output as it was.
    """
    blocks, num_shards, workers = plan.blocks, plan.num_shards, plan.workers
    options = PipelineOptions(list(worker_args(workers, config.beam_args)))
    runner = runner_for(options, workers, worker_command)
    if config.workers == AUTO:
        log.info("--workers auto: %s", plural(workers, "worker"))
    if needs_check(config.beam_args):
        log.info("checking that the runner's workers can run tpufeed")
        check_workers(config.beam_args, config.worker_start_timeout)
    with no_ipython_probe():
        pipeline = beam.Pipeline(runner=runner, options=quick_options(options, config.beam_args))
        writer = _pipeline_parts(pipeline, config, blocks, num_shards)
    with noting_interrupts() as interrupted:
        try:
            with no_ipython_probe():
                result = _run(pipeline)
            text, manifest = _staged(writer)
            runner_name = options.view_as(StandardOptions).runner or "FnApiRunner"
            check_counts(result, manifest, writer.output, runner_name)
            _refuse_empty(manifest)
            writer.switch_in(text)
        except BaseException as e:
            writer.discard()
            failure = _failure(e, interrupted.signum, config.output)
            if failure is e:
                raise
            raise failure from None if isinstance(failure, KeyboardInterrupt) else e
    info = manifest["build"]
    return {
        "output": writer.output,
        "records_in": info["records_in"],
        "records_out": manifest["num_records"],
        "skipped": info["skipped"],
        "filtered": info["filtered"],
        "shards": len(manifest["shards"]),
        "bytes": sum(s["num_bytes"] for s in manifest["shards"]),
        "blocks": len(blocks),
        "workers": workers,
    }


def _refuse_empty(manifest: dict[str, Any]) -> None:
    """A build that made no record is refused before its dataset replaces the output: an
    empty dataset is never what `tpufeed build` was asked for."""
    if manifest["num_records"]:
        return
    info = manifest["build"]
    if not info["records_in"]:
        why = "its --input files hold no records (empty files, a CSV of only its header)"
    else:
        why = (
            f"{plural(info['records_in'], 'input record')} read, none kept: "
            f"{info['filtered']:,} dropped by --transform, {info['skipped']:,} skipped as bad "
            "(--max-bad)"
        )
    raise InvalidArgumentError(
        f"the build made no records: {why}; nothing was written, the output is as it was"
    )


def _staged(writer: ShardChunks) -> tuple[str, dict[str, Any]]:
    """The text and contents of the manifest the pipeline wrote beside the new shards."""
    path = shard_files.staged_manifest(writer.output, writer.build_id)
    text = shard_files.read_text(path)
    if text is None:
        raise TpufeedError(f"{writer.output}: the pipeline finished but wrote no manifest")
    return text, json.loads(text)


def _run(pipeline: beam.Pipeline) -> PipelineResult:
    result = pipeline.run()
    result.wait_until_finish()
    return result


def _failure(error: BaseException, interrupted: int | None, output: str) -> BaseException:
    """What a failed or stopped build raises, its files removed: KeyboardInterrupt for Ctrl-C
    (`Terminated` for SIGTERM; `interrupted`: the signal noted while the pipeline ran), one
    line naming the file for a disk error or the worker for a lost worker process."""
    untouched = f"{output} is as it was (the new dataset's files were removed)"
    if interrupted == signal.SIGTERM or isinstance(error, Terminated):
        return Terminated(f"the build was stopped: {untouched}")
    if interrupted is not None or isinstance(error, KeyboardInterrupt):
        return KeyboardInterrupt(f"the build was stopped: {untouched}")
    disk = os_error_in(error)
    if disk is not None:
        return disk_failure(output, disk, str(error))
    lost = lost_worker(error, output)
    if lost is not None:
        return lost
    return _without_step_names(_from_worker(error))


_STEP_NAME = re.compile(r" \[while running '[^']*'\]")
# How a worker process's error comes back from Beam (--workers N): a RuntimeError whose text is
# the worker's traceback, ending in the exception's line.
_WORKER_RAISED = re.compile(r"^tpufeed\.errors\.(\w+): ", re.M)


def _from_worker(error: BaseException) -> BaseException:
    """The tpufeed error a Beam worker process raised, as that worker raised it, from the
    RuntimeError that carries its traceback as text; `error` itself otherwise."""
    if not isinstance(error, RuntimeError) or isinstance(error, TpufeedError):
        return error
    text = str(error)
    found = list(_WORKER_RAISED.finditer(text))
    if not found:
        return error
    last = found[-1]
    kind = getattr(errors, last.group(1), None)
    message = text[last.end() :].rstrip()
    if not (isinstance(kind, type) and issubclass(kind, TpufeedError)):
        kind = TpufeedError
    try:
        made = kind(message)
    except TypeError:  # a class that needs more than a message
        made = TpufeedError(message)
    made.__cause__ = error
    return made


def _without_step_names(error: BaseException) -> BaseException:
    """A tpufeed error as tpufeed worded it: Beam adds the step it was raised in to the message
    (" [while running 'ReadBlock/ParDo(ReadBlock)']"), a name of the build's insides that
    says nothing to its user; the message already names the file, record and cause."""
    if isinstance(error, TpufeedError) and error.args and isinstance(error.args[0], str):
        error.args = (_STEP_NAME.sub("", error.args[0]).rstrip("\n"), *error.args[1:])
    return error
