"""The `tpufeed build` pipeline: raw inputs -> --transform functions -> WriteShards.

Records keep their input order: each gets the order key (input file, record, output) and
shards are contiguous runs of that order. A malformed input record or a transform that
raises stops the build with an error naming the file and line, unless `max_bad` allows
skipping it; skips are counted, listed in the manifest, and more than `max_bad` of them
fail the build before anything is finalized.

>>> build(BuildConfig(inputs=("raw/*.jsonl",), output="ds", num_shards=4))  # doctest: +SKIP
{'records_in': 1000, 'records_out': 1000, 'skipped': 0, 'filtered': 0, 'shards': 4, ...}
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.pvalue import AsSingleton, TaggedOutput

from tpufeed.beam import ranking, shard_files
from tpufeed.beam.build_progress import progress
from tpufeed.beam.inputs import InputFile, Malformed, expand_inputs, read_input
from tpufeed.beam.user_transforms import (TransformChain, load_transform, normalize_record,
                                          resolve_spec)
from tpufeed.beam.write_shards import ShardEncoded, encode_record
from tpufeed._words import plural
from tpufeed.errors import InvalidArgumentError, SourceError, TpufeedError, TransformError
from tpufeed.sources.formats import get_format
from tpufeed.sources.manifest import MANIFEST_NAME
from tpufeed.sources.record_formats import RecordFormat, get_record_format

__all__ = ["BuildConfig", "build", "in_process_runner"]

log = logging.getLogger("tpufeed.build")
_EXAMPLES = 20
_PROGRESS_EVERY_S = 5.0


def in_process_runner() -> beam.runners.PipelineRunner:
    """Beam's in-process runner; unlike the plain DirectRunner it never downloads Prism."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    return FnApiRunner()


@dataclass(frozen=True)
class BuildConfig:
    """What to build; `beam_args` are Beam pipeline options (`--runner DataflowRunner ...`).
    A folder that already holds a dataset is replaced only with `overwrite=True`.
    `record_format`: "codec" (tpufeed's) or "tf_example" (`tf.train.Example`)."""

    inputs: tuple[str, ...]
    output: str
    num_shards: int = 1
    file_format: str = "array_record"
    transforms: tuple[str, ...] = ()
    max_bad: int = 0
    beam_args: tuple[str, ...] = ()
    overwrite: bool = False
    record_format: str = "codec"

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str) or not self.inputs:
            raise InvalidArgumentError(f"inputs must be a non-empty list of paths or globs, "
                                       f"got {self.inputs!r}")
        if not isinstance(self.num_shards, int) or self.num_shards < 1:
            raise InvalidArgumentError(f"--num-shards must be a positive int, got {self.num_shards!r}")
        if get_format(self.file_format, "--format").writer is None:
            raise InvalidArgumentError(f"--format {self.file_format}: tpufeed does not write it")
        get_record_format(self.record_format, "--record-format")
        if not isinstance(self.max_bad, int) or self.max_bad < 0:
            raise InvalidArgumentError(f"--max-bad must be a non-negative int, got {self.max_bad!r}")
        if not isinstance(self.overwrite, bool):
            raise InvalidArgumentError(f"overwrite must be True or False, got {self.overwrite!r}")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "transforms", tuple(resolve_spec(t) for t in self.transforms))
        object.__setattr__(self, "beam_args", tuple(self.beam_args))


class _ReadInput(beam.DoFn):
    """Reads one input file: records go on, malformed ones to "bad" (or raise, with no skips).
    Logs each file read with the share of the input done and an ETA (for this worker)."""

    def __init__(self, fail_fast: bool, sizes: list[int | None]):
        self._fail_fast = fail_fast
        self._files = len(sizes)
        # Bytes of each input file; None counts files (a folder of images, or a size unknown).
        self._sizes = None if None in sizes else [size for size in sizes if size is not None]
        self._read = Metrics.counter("tpufeed", "records_in")

    def setup(self) -> None:
        self._files_done, self._bytes_done = 0, 0
        self._start: float | None = None

    def process(self, element: tuple[int, InputFile]) -> Iterator[Any]:
        file_index, item = element
        if self._start is None:
            self._start = time.monotonic()
        count = bad = 0
        for index, origin, record in read_input(item):
            count += 1
            if isinstance(record, Malformed):
                bad += 1
                if self._fail_fast:
                    raise SourceError(f"{record} (pass --max-bad N to skip up to N bad records)",
                                      path=item.path, record=index)
                yield TaggedOutput("bad", str(record))
            else:
                yield file_index, index, origin, record
        self._read.inc(count)
        self._files_done += 1
        elapsed = time.monotonic() - self._start
        if self._sizes is None:
            done = progress(self._files_done, self._files, elapsed)
        else:
            self._bytes_done += self._sizes[file_index]
            done = progress(self._bytes_done, sum(self._sizes), elapsed, " of the input bytes")
        log.info("read %s: %s%s (input %d of %d; %s)", item.path, plural(count, "record"),
                 f", {bad} malformed" if bad else "", self._files_done, self._files, done)


class _Process(beam.DoFn):
    """Runs the transforms and encodes: (order key, (bytes, kind)); failures go to "bad".
    Every few seconds logs the records done of those read, with an ETA (for this worker)."""

    def __init__(self, transforms: tuple[str, ...], paths: list[str], fail_fast: bool,
                 record_format: RecordFormat):
        self._specs, self._paths, self._fail_fast = transforms, paths, fail_fast
        self._record_format = record_format
        self._out = Metrics.counter("tpufeed", "records_out")
        self._chain: TransformChain | None = None

    def setup(self) -> None:
        self._chain = TransformChain(self._specs)
        self._done, self._last_log = 0, time.monotonic()
        self._start: float | None = None

    def process(self, element: tuple[int, int, str, Any], total: int) -> Iterator[Any]:
        file_index, index, origin, record = element
        if self._chain is None:
            raise TpufeedError("the transforms are loaded by setup(), which Beam calls first")
        if self._start is None:
            self._start = time.monotonic()
        try:
            outputs = self._chain(record, file_index, index)
            encoded = [encode_record(normalize_record(r), origin, self._record_format)
                       for r in outputs]
        except Exception as e:  # noqa: BLE001 - user data and functions may raise anything
            if self._fail_fast:
                tb = getattr(e, "traceback_text", None) or ""
                raise TransformError(f"{origin}: {e} (pass --max-bad N to skip up to N bad "
                                     f"records){chr(10) + tb if tb else ''}", record=index,
                                     path=self._paths[file_index],
                                     traceback_text=tb or None) from e
            yield TaggedOutput("bad", f"{origin}: {e}")
            return
        if not encoded:
            yield TaggedOutput("filtered", 1)
        for sub, item in enumerate(encoded):
            yield ranking.order_key((file_index, index, sub)), item
        self._out.inc(len(encoded))
        self._done += 1
        now = time.monotonic()
        if now - self._last_log >= _PROGRESS_EVERY_S:
            self._last_log = now
            log.info("processed %s of %s (%s)", f"{self._done:,}", plural(total, "record"),
                     progress(self._done, total, now - self._start))


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

    def process(self, _: Any, read: int, bad: tuple[int, list[str]], filtered: int) -> Iterator[dict]:
        count, examples = bad
        if count > self._max_bad:
            listed = "\n  ".join(examples)
            raise SourceError(f"{count} bad records, more than --max-bad {self._max_bad}; the "
                              f"first {len(examples)}:\n  {listed}")
        for line in examples:
            log.warning("skipped %s", line)
        yield {"records_in": read, "skipped": count, "skipped_examples": examples,
               "filtered": filtered}


def _pipeline_parts(p: beam.Pipeline, config: BuildConfig, files: list[InputFile]) -> ShardEncoded:
    fail_fast = config.max_bad == 0
    read = (p | "Inputs" >> beam.Create(list(enumerate(files)))
            | "Read" >> beam.ParDo(_ReadInput(fail_fast, [_input_bytes(f) for f in files]))
            .with_outputs("bad", main="records"))
    ok = read.records | "ReadOk" >> beam.Map(lambda _: 1)
    n_ok = ok | "CountOk" >> beam.CombineGlobally(sum)  # the total that progress counts to
    processed = (read.records | "Spread" >> beam.Reshuffle()
                 | "Process" >> beam.ParDo(_Process(config.transforms, [f.path for f in files],
                                                    fail_fast,
                                                    get_record_format(config.record_format)),
                                           AsSingleton(n_ok))
                 .with_outputs("bad", "filtered", main="records"))
    bad = ((read.bad, processed.bad) | "AllBad" >> beam.Flatten()
           | "CountBad" >> beam.CombineGlobally(_BadRecords()))
    n_read = ((ok, read.bad | "ReadBad" >> beam.Map(lambda _: 1))
              | "AllRead" >> beam.Flatten() | "CountRead" >> beam.CombineGlobally(sum))
    n_filtered = processed.filtered | "CountFiltered" >> beam.CombineGlobally(sum)
    info = (p | "Check" >> beam.Create([None])
            | "CheckBad" >> beam.ParDo(_CheckBad(config.max_bad), AsSingleton(n_read),
                                       AsSingleton(bad), AsSingleton(n_filtered)))
    writer = ShardEncoded(
        config.output, config.num_shards, config.file_format, record_format=config.record_format,
        build={"order": "input", "inputs": list(config.inputs),
               "transforms": list(config.transforms), "max_bad": config.max_bad},
        info=info)
    processed.records | "WriteShards" >> writer
    return writer


def _input_bytes(item: InputFile) -> int | None:
    """The size of an input file, for progress; None for a folder or where it is unknown."""
    try:
        if "://" in item.path:
            from apache_beam.io.filesystems import FileSystems
            return FileSystems.match([item.path])[0].metadata_list[0].size_in_bytes
        return None if os.path.isdir(item.path) else os.path.getsize(item.path)
    except Exception:  # noqa: BLE001 - progress is best effort; the read reports real errors
        return None


_IN_PROCESS_RUNNERS = {None, "directrunner", "direct", "fnapirunner", "switchingdirectrunner",
                       "apache_beam.runners.portability.fn_api_runner.fnapirunner"}


def _runner(options: PipelineOptions) -> beam.runners.PipelineRunner | None:
    """The in-process runner unless --runner names another; refuses its unsafe modes."""
    name = options.view_as(StandardOptions).runner
    workers = options.view_as(DirectOptions).direct_num_workers
    if (name is None or name.lower() in _IN_PROCESS_RUNNERS) and workers not in (None, 1):
        raise InvalidArgumentError(
            f"--direct_num_workers={workers}: Beam's in-process runner drops records when it "
            "runs bundles on several workers (a race in FnApiRunner's buffers, seen with "
            "apache-beam 2.77), so tpufeed builds locally with one worker; use a cluster "
            "runner (--runner DataflowRunner, FlinkRunner, SparkRunner) to scale out")
    return in_process_runner() if name is None else None


def _check_counts(result: Any, manifest: dict[str, Any], output: str) -> None:
    """Cross-checks the manifest against the DoFns' own counters (where the runner has them).

    A runner that loses elements between steps would otherwise leave a consistent-looking
    dataset with records missing; the manifest is removed and the build fails instead.
    """
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace("tpufeed"))["counters"]
    except Exception:  # noqa: BLE001 - some runners do not report metrics
        return
    totals: dict[str, int] = {}
    for counter in counters:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + (value or 0)
    expected = {"records_in": manifest["build"]["records_in"],
                "records_out": manifest["num_records"],
                "records_written": manifest["num_records"]}
    wrong = {k: (totals[k], v) for k, v in expected.items() if k in totals and totals[k] != v}
    if wrong:
        shard_files.delete_paths([shard_files.join(output, MANIFEST_NAME)])
        details = ", ".join(f"{k}: steps counted {a}, the manifest has {b}"
                            for k, (a, b) in wrong.items())
        raise TpufeedError(f"{output}: the runner lost or repeated records ({details}); the "
                           "manifest was removed, so the dataset does not open")


@contextlib.contextmanager
def _noting_interrupts() -> Iterator[threading.Event]:
    """An event set by Ctrl-C while the pipeline runs: Beam re-raises a KeyboardInterrupt in a
    step as a RuntimeError, which must not read as a failed build."""
    interrupted = threading.Event()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
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
    return SourceError(f"the build into {output} failed at {path}: {error.strerror or error}"
                       f"{where}; no manifest was written. Check that the disk is writable "
                       "and has room, and run it again", path=str(path))


def build(config: BuildConfig) -> dict[str, Any]:
    """Runs the build and returns its summary (records in/out, skipped, shards, bytes, seconds).

    Ctrl-C raises KeyboardInterrupt, with the temporary shards removed and no manifest written.
    """
    start = time.monotonic()
    shard_files.check_output(config.output, config.num_shards, config.file_format,
                             overwrite=config.overwrite)
    files = expand_inputs(config.inputs)
    for spec in config.transforms:  # fail here, before any work, on a bad name
        load_transform(spec)
    options = PipelineOptions(list(config.beam_args))
    runner = _runner(options)
    log.info("building %s from %s into %s", config.output, plural(len(files), "input file"),
             plural(config.num_shards, f"{config.file_format} shard"))
    pipeline = beam.Pipeline(runner=runner, options=options)
    writer = _pipeline_parts(pipeline, config, files)
    with _noting_interrupts() as interrupted:
        try:
            result = pipeline.run()
            result.wait_until_finish()
        except BaseException as e:
            if not shard_files.is_remote(writer.temp_dir):
                shard_files.delete_paths([writer.temp_dir])
            if interrupted.is_set():
                raise KeyboardInterrupt(f"the build's temporary shards in {config.output} were "
                                        "removed; no new manifest was written") from None
            disk = _os_error_in(e)
            if disk is not None:
                raise _disk_failure(config.output, disk, str(e)) from e
            raise
    text = shard_files.read_text(shard_files.join(writer.output, MANIFEST_NAME))
    if text is None:
        raise TpufeedError(f"{config.output}: the pipeline finished but wrote no manifest")
    manifest = json.loads(text)
    _check_counts(result, manifest, writer.output)
    seconds = time.monotonic() - start
    info = manifest["build"]
    return {"output": writer.output, "records_in": info["records_in"],
            "records_out": manifest["num_records"], "skipped": info["skipped"],
            "filtered": info["filtered"], "shards": len(manifest["shards"]),
            "bytes": sum(s["num_bytes"] for s in manifest["shards"]), "seconds": seconds}
