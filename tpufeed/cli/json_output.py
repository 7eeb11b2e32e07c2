"""`--json`: what each command prints as one JSON document on stdout, under a versioned schema.

Every document has a top-level `"schema"` key, `"<name>/<version>"` (`"tpufeed.inspect/1"`),
and the keys its `JsonSchema` lists, always present (null where they do not apply). A version
goes up when a key is removed or renamed or its meaning changes; new keys come without a new
version, so a reader ignores keys it does not know. Non-finite numbers (an infinite ratio) are
null: the output is strict JSON, which `jq` and every parser read. Progress and logs go to
stderr, so stdout holds the document alone. docs/reference/cli.md lists every schema, from
here (docs/generate_cli_reference.py).

>>> INSPECT.emit({...})   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BENCH",
    "BUILD",
    "CACHE_CLEAR",
    "CACHE_LS",
    "INSPECT",
    "QUICKSTART",
    "SCHEMAS",
    "TRACE_MERGE",
    "JsonSchema",
    "add_json_option",
    "jsonable",
]


@dataclass(frozen=True)
class JsonSchema:
    """One command's `--json` document: its name, version, and what each key holds.

    `fields` maps a key's path to its meaning: `key`, `key.sub` (a key of an object),
    `key[].sub` (a key of each object in a list) or `key{}.sub` (a key of each value of an
    object whose keys are the data's, such as record fields). A path with no paths below it
    is documented as a whole.
    """

    name: str
    version: int
    fields: Mapping[str, str]

    @property
    def id(self) -> str:
        return f"{self.name}/{self.version}"

    def emit(self, payload: Mapping[str, Any]) -> None:
        """Prints `{"schema": id, **payload}` on stdout as strict JSON."""
        document = jsonable({"schema": self.id, **payload})
        sys.stdout.write(json.dumps(document, indent=2, allow_nan=False) + "\n")


def jsonable(value: Any) -> Any:
    """`value` with numpy scalars and arrays as Python ones, tuples as lists, and NaN and the
    infinities as None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def add_json_option(parser: argparse.ArgumentParser, *schemas: JsonSchema) -> None:
    """`--json` on `parser`, naming the schemas the command prints (the CLI reference lists
    them from the parser's `json_schemas` default)."""
    names = " or ".join(s.id for s in schemas)
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print the result as one JSON document ({names}) on stdout; progress and logs "
        "stay on stderr",
    )
    parser.set_defaults(json_schemas=schemas)


INSPECT = JsonSchema(
    "tpufeed.inspect",
    1,
    {
        "schema": '"tpufeed.inspect/1"',
        "kind": '"dataset" (built by `tpufeed build`: a manifest), "folder" (a folder of '
        'record files with no manifest) or "files" (record files or globs)',
        "paths": "the paths given, as given",
        "file_format": '"array_record", "tfrecord", "parquet", "webdataset", "mds", "jsonl" '
        'or "csv"',
        "record_format": 'a dataset\'s records, as its manifest names them ("tpufeed.codec", '
        '"tf.train.Example"); null otherwise',
        "manifest": "the dataset's manifest.json; null otherwise",
        "tpufeed_version": "the tpufeed that built the dataset; null otherwise",
        "num_records": "records in all files",
        "num_bytes": "bytes of all shards, as the manifest lists them; null without one",
        "files": "one object per record file or shard, in order",
        "files[].path": "its path (a dataset's: relative to the dataset's folder)",
        "files[].num_records": "its records",
        "files[].num_bytes": "its size, as the manifest lists it; null without one",
        "files[].crc32c": "its CRC32C (hex), as the manifest lists it; null without one",
        "features": "a dataset's schema: each key's spec as the manifest infers it; {} otherwise",
        "classes": "an image-folder dataset's class folder names in label order (label i is "
        "classes[i]; an object of such lists by folder where folders differ); null otherwise",
        "statistics": "what the build counted while it wrote a dataset (`Dataset.statistics`); "
        "null for record files",
        "statistics.recorded": "false for a dataset built before statistics were recorded (or "
        "whose statistics are damaged): then only `why` follows",
        "statistics.why": "why none were recorded (absent when they were)",
        "statistics.num_records": "records counted",
        "statistics.record_bytes": "the stored records' sizes in bytes: count, min, max, sum, "
        "mean, and histogram, rows [lowest, highest, count] of the non-empty buckets (each "
        "length below 16 its own bucket, then 8 equal buckets a power of two)",
        "statistics.fields": "one object per field, by name",
        "statistics.fields{}.count": "the records holding the field",
        "statistics.fields{}.types": 'the types seen ("ndarray:int32", "int", "str", ...)',
        "statistics.fields{}.shape": "an array field's dimensions where every record agrees, "
        "null where they vary; null for other fields",
        "statistics.fields{}.ndims": "the numbers of dimensions seen",
        "statistics.fields{}.lengths": "the histogram of its lengths (an array's first "
        'dimension, bytes or characters), as record_bytes; "not recorded" for scalars',
        "statistics.inputs": "one object per input file of `tpufeed build`, in order: path, "
        'read (records read) and records (records of the dataset); "not recorded" for '
        "WriteShards",
        "record_0": "record 0 as read (null when there is none, or a shard failed --verify)",
        "record_0.num_bytes": "its size in bytes; null when it was read as fields (a dataset's "
        "records, Parquet rows)",
        "record_0.fields": "its fields when it decodes (a tpufeed.codec record, a dataset's "
        "record, a row); null when it does not",
        "record_0.fields{}.dtype": "an array field's numpy dtype",
        "record_0.fields{}.shape": "an array field's shape",
        "record_0.fields{}.type": "another field's Python type",
        "record_0.fields{}.repr": "the field's value, as Python shows it (60 characters at "
        "most): another field's, or an array's of 16 elements or fewer (as a list); absent "
        "for a larger array",
        "record_0.head_hex": "the first 64 bytes in hex, when the record does not decode; null "
        "otherwise",
        "verify": "with --verify, what was checked; null without it",
        "verify.checked": "how many files were checked",
        "verify.method": '"manifest" (each shard\'s size, CRC32C and record count against the '
        'manifest), "read" (every record read, the format\'s own checksums) or "parse" (JSONL '
        "and CSV: every line parsed as the build parses it)",
        "verify.failures": "one message per file that failed, naming it (JSONL and CSV: per "
        "malformed line, the first 20, then how many more); exit status 1 when any",
    },
)

CACHE_LS = JsonSchema(
    "tpufeed.cache.ls",
    1,
    {
        "schema": '"tpufeed.cache.ls/1"',
        "dir": "the cache directory",
        "entries": "one object per cached shard",
        "entries[].key": "its name in the cache",
        "entries[].url": "the gs:// object it is a copy of (null if not recorded)",
        "entries[].size": "bytes on disk",
        "entries[].complete": "true: a whole copy; false: a download in progress or left by a "
        "process that died",
        "entries[].last_read": "when it was last read (Unix time, seconds); null: never",
        "num_entries": "how many entries",
        "total_bytes": "their bytes together",
    },
)

CACHE_CLEAR = JsonSchema(
    "tpufeed.cache.clear",
    1,
    {
        "schema": '"tpufeed.cache.clear/1"',
        "dir": "the cache directory",
        "removed_files": "files removed",
        "freed_bytes": "bytes of shards freed",
        "kept_in_use": "entries kept because a running job holds them",
    },
)

BENCH = JsonSchema(
    "tpufeed.bench",
    1,
    {
        "schema": '"tpufeed.bench/1"',
        "stats": "the run's statistics: `PipelineStats.to_dict()` (API reference, Statistics)",
        "verdict": "what limits the pipeline and what to change",
        "verdict.batches_per_s": "batches per second over the run",
        "verdict.records_per_s": "records per second over the run",
        "verdict.shortest_step_fed": "the shortest training step (seconds) the pipeline keeps up "
        "with",
        "verdict.step_time": "--step-time",
        "verdict.bottleneck": "the slowest stage",
        "verdict.first_batch_s": "seconds to the first batch",
        "verdict.wait_after_first_batch": "the consumer's waiting share after the first batch",
        "verdict.capacity_records_per_s": "the rate all stages together could give",
        "verdict.cores": "`cores`, `busy` (cores' worth in use; null if unknown), `consumer` "
        "(the consuming process's share)",
        "verdict.suggestion": "what to change, in words",
        "verdict.change": 'the change as settings (`{"workers": 2}`), or null',
        "verdict.measured": "whether --try measured the change",
        "verdict.tried": "with --try: the change's measured effect (`change`, `batches`, "
        "`records`, `before_records_per_s`, `after_records_per_s`, `ratio`, `outcome`, "
        "`first_batch_s`); null otherwise",
        "verdict.input_bound": "with --step-time: whether training waits for input; null without",
        "verdict.slowdown": "with --step-time: how much slower training runs than its step "
        "allows (null without --step-time, or when unbounded)",
        "verdict.too_short": "whether the run was too short to judge (under 5 batches or "
        "0.5 s): then `suggestion` says so, and nothing is advised or tried",
        "trace": "the --trace file written, or null",
        "interrupted": "whether Ctrl-C ended the run (exit status 130): the document covers the "
        "batches before it",
    },
)

BUILD = JsonSchema(
    "tpufeed.build",
    1,
    {
        "schema": '"tpufeed.build/1"',
        "output": "the dataset folder written",
        "records_in": "records read",
        "records_out": "records written",
        "skipped": "bad records skipped (at most --max-bad)",
        "filtered": "records a --transform dropped",
        "shards": "shards written",
        "bytes": "bytes of the shards",
        "seconds": "how long the build took: the plan, Beam's pipeline and the checks (the "
        "command's start-up before them, Python's and its imports', is not counted)",
        "records_per_s": "records written per second",
        "blocks": "blocks the inputs were read in",
        "workers": "local worker processes (--workers)",
        "file_format": '"array_record" or "tfrecord"',
        "record_format": '"codec" or "tf_example"',
    },
)

QUICKSTART = JsonSchema(
    "tpufeed.quickstart",
    1,
    {
        "schema": '"tpufeed.quickstart/1"',
        "dataset": "the folder of the shards written",
        "shards": "how many ArrayRecord shards",
        "train_records": "training records",
        "devices": "JAX devices trained on",
        "epochs": "epochs trained",
        "records_per_s": "pipeline + training step throughput",
        "input_wait_fraction": "the share of the loop's time spent waiting for a batch",
        "exactly_once_every_epoch": "every record delivered once in each epoch (exit 1 if not)",
        "resume_matches": "an iterator resumed mid-epoch continued exactly (exit 1 if not)",
        "test_accuracy": "accuracy on the 261 held-out digits",
        "seconds": "how long it all took",
    },
)

TRACE_MERGE = JsonSchema(
    "tpufeed.trace.merge",
    1,
    {
        "schema": '"tpufeed.trace.merge/1"',
        "output": "the merged trace file written",
        "events": "events merged (the tracks' names not counted)",
        "hosts": "one object per file merged",
        "hosts[].host": "its host number: the process index the file records, else the next "
        "number after those, in the order given",
        "hosts[].file": "the file, as given",
        "hosts[].hostname": "the host's name, as the file records it (null in older files)",
        "hosts[].pid": "the recording process's pid (null in older files)",
        "hosts[].aligned_by": '"measured offset", "wall clock only" or "not aligned" (a file '
        "with no clock: older tpufeed, another program)",
        "hosts[].offset_ns": "its trace clock minus process 0's, as measured (null without)",
        "hosts[].error_ns": "the offset's bound: half the round trip that measured it",
        "hosts[].shift_us": "microseconds added to the file's timestamps",
        "hosts[].events": "its events merged",
        "hosts[].dropped_events": "events its recording dropped (its ring was full)",
        "hosts[].note": "why its offset was not measured, or was measured in fewer round trips",
        "alignment": "how close the hosts' events are aligned",
        "alignment.max_error_ns": "the largest bound of the measured offsets (null: none)",
        "alignment.max_error_host": "the host with that bound",
        "alignment.wall_clock_only": "the hosts aligned by wall clock only",
        "alignment.not_aligned": "the hosts whose files carry no clock",
        "alignment.runs": "how many runs the measured offsets come from",
        "alignment.drift_span_s": "the longest time from a host's offset measurement to its "
        "last event, in seconds (the clocks drift apart after a measurement; null: unknown)",
        "alignment.statement": "all of it in words, as printed",
    },
)

SCHEMAS = (INSPECT, CACHE_LS, CACHE_CLEAR, BENCH, BUILD, QUICKSTART, TRACE_MERGE)
