"""The `tpufeed build` pipeline: raw inputs -> blocks -> --transform functions -> shards.

Records keep their input order. The inputs are cut into deterministic blocks (see `blocks`);
a worker reads one block, runs the transforms and encodes, and sends the records on in chunks
that carry (block, position in the block). The blocks' record counts become each block's first
rank (prefix sums, one small side input), so rank = block start + position, and shards are
contiguous runs of that order, balanced within one record (see `write_shards`). No step sees
every record on one key, and the result depends on the inputs alone, never on bundles or
workers. A malformed input record or a transform that raises stops the build with an error
naming the file and line, unless `max_bad` allows skipping it; skips are counted, listed in
the manifest, and more than `max_bad` of them fail the build before the manifest is written.

>>> build(BuildConfig(inputs=("raw/*.jsonl",), output="ds", num_shards=4))  # doctest: +SKIP
{'records_in': 1000, 'records_out': 1000, 'skipped': 0, 'filtered': 0, 'shards': 4, ...}
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pvalue import AsSingleton, TaggedOutput

from tpufeed.beam import shard_files
from tpufeed.beam.blocks import (
    DEFAULT_BLOCK_BYTES,
    Block,
    BlockStart,
    count_block,
    file_starts,
    needs_count,
    plan_blocks,
    read_block,
)
from tpufeed.beam.build_progress import progress
from tpufeed.beam.build_runner import check_counts, runner_for, worker_args
from tpufeed.beam.inputs import Malformed, expand_inputs
from tpufeed.beam.schema import RecordSummary
from tpufeed.beam.shard_size import (
    DEFAULT_MAX_SHARD_BYTES,
    check_shard_size,
    input_bytes,
    suggest_num_shards,
)
from tpufeed.beam.user_transforms import (
    TransformChain,
    load_transform,
    normalize_record,
    resolve_spec,
)
from tpufeed.beam.write_shards import CODEC, ShardChunks, encode_record
from tpufeed.errors import InvalidArgumentError, SourceError, TpufeedError, TransformError, plural
from tpufeed.sources.formats import get_format
from tpufeed.sources.manifest import MANIFEST_NAME
from tpufeed.sources.record_formats import CODEC as CODEC_FORMAT
from tpufeed.sources.record_formats import RecordFormat, get_record_format

__all__ = ["BuildConfig", "build"]

log = logging.getLogger("tpufeed.build")
_EXAMPLES = 20
_PROGRESS_EVERY_S = 5.0
_CHUNK_RECORDS = 4096  # records of one chunk: few elements for the runner, small to hold
_CHUNK_BYTES = 8 << 20


def _positive_int(value: object, option: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{option} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class BuildConfig:
    """What to build; `beam_args` are Beam pipeline options (`--runner DataflowRunner ...`).
    A folder that already holds a dataset is replaced only with `overwrite=True`.
    `record_format`: "codec" (tpufeed's) or "tf_example" (`tf.train.Example`).
    `num_shards=None` picks shards of about 256 MB of input; a count that would make a shard
    larger than `max_shard_bytes` (what one worker holds while writing it) is refused.
    `workers` local worker processes; `block_bytes` is the size of the blocks inputs are cut into."""

    inputs: tuple[str, ...]
    output: str
    num_shards: int | None = None
    file_format: str = "array_record"
    transforms: tuple[str, ...] = ()
    max_bad: int = 0
    beam_args: tuple[str, ...] = ()
    overwrite: bool = False
    record_format: str = "codec"
    workers: int = 1
    block_bytes: int = DEFAULT_BLOCK_BYTES
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str) or not self.inputs:
            raise InvalidArgumentError(
                f"inputs must be a non-empty list of paths or globs, got {self.inputs!r}"
            )
        if self.num_shards is not None:
            _positive_int(self.num_shards, "--num-shards")
        _positive_int(self.workers, "--workers")
        _positive_int(self.block_bytes, "block_bytes")
        _positive_int(self.max_shard_bytes, "max_shard_bytes")
        if get_format(self.file_format, "--format").writer is None:
            raise InvalidArgumentError(f"--format {self.file_format}: tpufeed does not write it")
        get_record_format(self.record_format, "--record-format")
        if not isinstance(self.max_bad, int) or self.max_bad < 0:
            raise InvalidArgumentError(
                f"--max-bad must be a non-negative int, got {self.max_bad!r}"
            )
        if not isinstance(self.overwrite, bool):
            raise InvalidArgumentError(f"overwrite must be True or False, got {self.overwrite!r}")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "transforms", tuple(resolve_spec(t) for t in self.transforms))
        object.__setattr__(self, "beam_args", tuple(self.beam_args))


class _ReadBlock(beam.DoFn):
    """Reads one block, runs the transforms and encodes: chunks (block, position, [bytes],
    kinds); malformed records and failed transforms go to "bad" (or raise, with no skips), and
    (records read, records filtered) to "stats". Logs each block ("input k of N": the blocks
    this worker read of all), and every few seconds the records done, with this worker's share
    of the input bytes and an ETA."""

    def __init__(
        self,
        transforms: tuple[str, ...],
        fail_fast: bool,
        record_format: RecordFormat,
        total_bytes: int,
        total_blocks: int,
    ):
        self._total_blocks = total_blocks
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

    def process(self, block: Block, starts: dict[int, BlockStart]) -> Iterator[Any]:
        if self._chain is None:
            raise TpufeedError("the transforms are loaded by setup(), which Beam calls first")
        if self._start is None:
            self._start = time.monotonic()
        datas: list[bytes] = []
        kinds = bytearray()
        summary = RecordSummary() if self._summarize else None
        position = size = read = filtered = 0
        for index, origin, record in read_block(block, starts[block.id]):
            read += 1
            if isinstance(record, Malformed):
                yield self._bad(str(record), None, block.path, index)
                continue
            try:
                outputs = [
                    normalize_record(r) for r in self._chain(record, block.file_index, index)
                ]
                encoded = [encode_record(r, origin, self._record_format) for r in outputs]
            except Exception as e:  # noqa: BLE001 - user data and functions may raise anything
                yield self._bad(f"{origin}: {e}", e, block.path, index)
                continue
            filtered += not encoded
            for (data, kind), out in zip(encoded, outputs):
                if summary is not None:
                    summary.add(out if kind == CODEC else None, len(data))
                datas.append(data)
                kinds.append(kind)
                size += len(data)
            if len(datas) >= _CHUNK_RECORDS or size >= _CHUNK_BYTES:
                yield block.id, position, datas, bytes(kinds)
                position += len(datas)
                datas, kinds, size = [], bytearray(), 0
            self._log_progress(read)
        if datas:
            yield block.id, position, datas, bytes(kinds)
        self._read.inc(read)
        self._out.inc(position + len(datas))
        yield TaggedOutput("stats", (read, filtered))
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


def _sum_stats(stats: Any) -> tuple[int, int]:
    read = filtered = 0
    for r, f in stats:
        read, filtered = read + r, filtered + f
    return read, filtered


class _BadRecords(beam.CombineFn):
    """(count, the first examples in sorted order): the same whatever the bundling."""

    def create_accumulator(self) -> tuple[int, list[str]]:
        return 0, []

    def add_input(self, acc: tuple[int, list[str]], item: str) -> tuple[int, list[str]]:
        return acc[0] + 1, sorted(acc[1] + [item])[:_EXAMPLES]

    def merge_accumulators(self, accs: Any) -> tuple[int, list[str]]:
        count = 0
        examples: list[str] = []
        for n, ex in accs:
            count, examples = count + n, sorted(examples + ex)[:_EXAMPLES]
        return count, examples

    def extract_output(self, acc: tuple[int, list[str]]) -> tuple[int, list[str]]:
        return acc


class _CheckBad(beam.DoFn):
    """The build's counts for the manifest; fails the job when skips exceed --max-bad."""

    def __init__(self, max_bad: int):
        self._max_bad = max_bad

    def process(self, _: Any, stats: tuple[int, int], bad: tuple[int, list[str]]) -> Iterator[dict]:
        (read, filtered), (count, examples) = stats, bad
        if count > self._max_bad:
            listed = "\n  ".join(examples)
            raise SourceError(
                f"{count} bad records, more than --max-bad {self._max_bad}; the "
                f"first {len(examples)}:\n  {listed}"
            )
        for line in examples:
            log.warning("skipped %s", line)
        yield {
            "records_in": read,
            "skipped": count,
            "skipped_examples": examples,
            "filtered": filtered,
        }


def _block_starts(
    counts: list[tuple[int, tuple[int, int]]], blocks: list[Block]
) -> dict[int, BlockStart]:
    known = {b.id: (b.count, 0) for b in blocks if b.count is not None}
    return file_starts(blocks, {**known, **dict(counts)})


def _pipeline_parts(
    p: beam.Pipeline, config: BuildConfig, blocks: list[Block], num_shards: int
) -> ShardChunks:
    fail_fast = config.max_bad == 0
    to_count = [
        b
        for b, after in zip(blocks, blocks[1:] + [None])
        if b.count is None and needs_count(b, after)
    ]
    starts = (
        p
        | "BlocksToCount" >> beam.Create(to_count)
        | "CountBlock" >> beam.Map(lambda b: (b.id, count_block(b)))
        | "AllCounts" >> beam.combiners.ToList()
        | "FileStarts" >> beam.Map(_block_starts, blocks)
    )
    read = (
        p
        | "Blocks" >> beam.Create(blocks)
        | "ReadBlock"
        >> beam.ParDo(
            _ReadBlock(
                config.transforms,
                fail_fast,
                get_record_format(config.record_format),
                sum(b.size for b in blocks),
                len(blocks),
            ),
            AsSingleton(starts),
        ).with_outputs("bad", "stats", "summary", main="chunks")
    )
    bad = read.bad | "CountBad" >> beam.CombineGlobally(_BadRecords())
    stats = read.stats | "CountRead" >> beam.CombineGlobally(_sum_stats)
    info = (
        p
        | "Check" >> beam.Create([None])
        | "CheckBad" >> beam.ParDo(_CheckBad(config.max_bad), AsSingleton(stats), AsSingleton(bad))
    )
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
        },
        info=info,
        summaries=read.summary,
    )
    read.chunks | "WriteShards" >> writer
    return writer


@contextlib.contextmanager
def _noting_interrupts() -> Iterator[threading.Event]:
    """An event set by Ctrl-C while the pipeline runs: Beam re-raises a KeyboardInterrupt in a
    step as a RuntimeError, which must not read as a failed build."""
    interrupted = threading.Event()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield interrupted  # signals go to the main thread; a caller's own handler stays
        return

    def on_interrupt(signum: int, frame: Any) -> None:
        interrupted.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind a failed run: Beam re-raises one met in a step as a RuntimeError
    whose context is the original."""
    seen: BaseException | None = error
    for _ in range(8):  # a chain is short; a bound in case it loops
        if seen is None or isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _disk_failure(output: str, error: OSError, outer: str) -> SourceError:
    """One line for a file that could not be read or written mid-build: the path, the cause,
    and the step it happened in."""
    step = re.search(r"\[while running '([^']+)'\]", outer)
    where = f" (in step {step.group(1)})" if step else ""
    path = error.filename or output
    return SourceError(
        f"the build into {output} failed at {path}: {error.strerror or error}"
        f"{where}; no manifest was written. Check that the disk is writable "
        "and has room, and run it again",
        path=str(path),
    )


def build(config: BuildConfig) -> dict[str, Any]:
    """Runs the build and returns its summary (records in/out, skipped, shards, bytes, seconds).

    Ctrl-C raises KeyboardInterrupt, with the half-written shards removed and no manifest written.
    """
    start = time.monotonic()
    options = PipelineOptions(list(worker_args(config.workers, config.beam_args)))
    runner = runner_for(options, config.workers)
    files = expand_inputs(config.inputs)
    for spec in config.transforms:  # fail here, before any work, on a bad name
        load_transform(spec)
    blocks = plan_blocks(files, config.block_bytes)
    size = input_bytes(blocks)
    num_shards = config.num_shards or suggest_num_shards(size)
    check_shard_size(size, num_shards, config.max_shard_bytes, config.output)
    shard_files.check_output(
        config.output, num_shards, config.file_format, overwrite=config.overwrite
    )
    log.info(
        "building %s from %s into %s",
        config.output,
        plural(len(files), "input file"),
        plural(num_shards, f"{config.file_format} shard"),
    )
    log.info(
        "reading %s in %s of up to %s bytes",
        plural(len(files), "input file"),
        plural(len(blocks), "block"),
        f"{config.block_bytes:,}",
    )
    pipeline = beam.Pipeline(runner=runner, options=options)
    writer = _pipeline_parts(pipeline, config, blocks, num_shards)
    with _noting_interrupts() as interrupted:
        try:
            result = pipeline.run()
            result.wait_until_finish()
        except BaseException as e:
            writer.remove_partial_files()
            if interrupted.is_set():
                raise KeyboardInterrupt(
                    f"the build's half-written shards in {config.output} "
                    "were removed; no new manifest was written"
                ) from None
            disk = _os_error_in(e)
            if disk is not None:
                raise _disk_failure(config.output, disk, str(e)) from e
            raise
    text = shard_files.read_text(shard_files.join(writer.output, MANIFEST_NAME))
    if text is None:
        raise TpufeedError(f"{config.output}: the pipeline finished but wrote no manifest")
    manifest = json.loads(text)
    check_counts(
        result, manifest, writer.output, options.view_as(StandardOptions).runner or "FnApiRunner"
    )
    seconds = time.monotonic() - start
    info = manifest["build"]
    return {
        "output": writer.output,
        "records_in": info["records_in"],
        "records_out": manifest["num_records"],
        "skipped": info["skipped"],
        "filtered": info["filtered"],
        "shards": len(manifest["shards"]),
        "bytes": sum(s["num_bytes"] for s in manifest["shards"]),
        "seconds": seconds,
        "blocks": len(blocks),
        "workers": config.workers,
    }
