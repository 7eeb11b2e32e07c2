"""`tpufeed inspect`: what is in a built dataset, a plain folder of shards, or record files;
with `verify=True`, whether every shard is intact.

`inspect_report` gathers it as the `tpufeed.inspect/1` document that `--json` prints;
inspection_text.py words it for people. `sources.built.manifest` (and the remote-storage code it
imports) is imported where a dataset is opened, not at the top: `tpufeed --help` makes this
command's parser without it.

>>> inspect_report(["data/train"], verify=True)["verify"]["failures"]  # doctest: +SKIP
[]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from tpufeed import codec
from tpufeed.cli.arguments import Subcommands
from tpufeed.cli.field_values import record_fields
from tpufeed.cli.inputs import (
    INPUT_FORMATS,
    TEXT_FORMATS,
    input_format,
    open_samples,
    text_files,
    text_records,
)
from tpufeed.cli.inspection_text import report_lines
from tpufeed.cli.json_output import INSPECT, add_json_option
from tpufeed.errors import (
    CodecError,
    CorruptDataError,
    InvalidArgumentError,
    SourceNotFoundError,
    TpufeedError,
    plural,
)
from tpufeed.sources.formats import FORMATS, format_for_path, get_format, guess_format
from tpufeed.storage.local import expand_paths

if TYPE_CHECKING:
    from tpufeed.sources.sharded import ShardedSource

__all__ = [
    "add_parser",
    "folder_shards",
    "inspect_paths",
    "inspect_report",
    "open_source",
    "run_command",
]

Report = dict[str, Any]
_VERIFY_BATCH = 1024
_LISTED_LINES = 20  # malformed JSONL or CSV lines named one by one; the rest are counted


def open_source(paths: list[str], fmt: str | None) -> ShardedSource[Any]:
    """The record files `paths` (paths or globs) in format `fmt` (None: told by the first
    file's name), as one source; only that format's reader is imported."""
    return _open(paths, fmt)[0]


def _open(paths: list[str], fmt: str | None) -> tuple[ShardedSource[Any], str]:
    """`open_source`, and the name of the format the files were read as."""
    files = expand_paths(paths)
    file_format = get_format(fmt, "--format") if fmt is not None else guess_format(files[0])
    source: ShardedSource[Any] = file_format.open_source(files)
    return source, file_format.name


def folder_shards(path: str) -> tuple[str, list[str]] | None:
    """(format, sorted record files) of a local folder with no manifest that holds record files
    of one format (as `tpufeed quickstart` writes); None for anything else."""
    from tpufeed.sources.built.manifest import MANIFEST_NAME

    if (
        "://" in path
        or not os.path.isdir(path)
        or os.path.exists(os.path.join(path, MANIFEST_NAME))
    ):
        return None
    found: dict[str, list[str]] = {}
    for name in sorted(os.listdir(path)):
        fmt = None if name.startswith(".") else format_for_path(name)
        if fmt is not None:
            found.setdefault(fmt.name, []).append(os.path.join(path, name))
    if len(found) > 1:
        kinds = [fmt for fmt in FORMATS.values() if fmt.name in found]
        raise InvalidArgumentError(
            f"{path} holds {' and '.join(f.title for f in kinds)} files and no {MANIFEST_NAME}; "
            f"name one kind by a glob, e.g. {os.path.join(path, '*' + kinds[0].extension)}"
        )
    return next(iter(found.items()), None)


def inspect_report(paths: list[str], fmt: str | None = None, verify: bool = False) -> Report:
    """What `paths` hold, as the `tpufeed.inspect/1` document (`json_output.INSPECT`): a
    dataset's manifest, or record files' counts; record 0; with `verify`, every shard checked."""
    from tpufeed.sources.built.manifest import ManifestSource, is_dataset_path

    kind = "files"
    source: ShardedSource[Any]
    other = input_format(paths, fmt)
    if other in TEXT_FORMATS:
        return _text_report(paths, other, verify)
    if other is not None and other not in FORMATS:  # WebDataset tars, an MDS folder
        source, file_format = open_samples(paths, other), other
    elif len(paths) == 1 and (plain := folder_shards(paths[0])) is not None:
        kind, (file_format, files) = "folder", plain
        source = open_source(files, file_format)
    elif len(paths) == 1 and is_dataset_path(paths[0]):
        _refuse_unfinished(paths[0])
        kind, source = "dataset", ManifestSource(paths[0])
    else:
        source, file_format = _open(paths, fmt)
    checked = None
    if verify:  # first, so that a damaged first shard is listed with the others
        checked = (_verify_dataset if kind == "dataset" else _verify_files)(source)
    sample = not (checked and checked["failures"])
    if kind == "dataset":
        report = _dataset_report(source, paths, sample)
    else:
        report = _files_report(source, paths, kind, file_format, sample)
    return {**report, "verify": checked}


def inspect_paths(
    paths: list[str], fmt: str | None = None, verify: bool = False
) -> tuple[list[str], list[str]]:
    """([the text `tpufeed inspect PATHS` prints], verification failures)."""
    report = inspect_report(paths, fmt, verify)
    return ["\n".join(report_lines(report))], report["verify"]["failures"] if verify else []


def _text_report(paths: list[str], name: str, verify: bool) -> Report:
    """JSONL or CSV files, read line by line as the build reads them: each file's records,
    record 0, and the malformed lines (each named: with `verify`, listed as failures, without
    it the first is an error)."""
    from tpufeed.beam.read.inputs import Malformed

    files: list[dict[str, Any]] = []
    failures: list[str] = []
    first: Report | None = None
    for path in text_files(paths):
        count = 0
        for _, record in text_records(path, name):
            if isinstance(record, Malformed):
                if not verify:
                    raise CorruptDataError(
                        f"{record} (tpufeed inspect --verify lists every one)", path=path
                    )
                failures.append(str(record))
                continue
            if first is None:
                first = {"num_bytes": None, "fields": record_fields(record), "head_hex": None}
            count += 1
        files.append({"path": path, "num_records": count, "num_bytes": None, "crc32c": None})
    total = sum(f["num_records"] for f in files)
    report = _report("files", paths, name, files, first, num_records=total)
    if len(failures) > _LISTED_LINES:  # a CSV read as JSONL fails on every line
        more = len(failures) - _LISTED_LINES
        failures = failures[:_LISTED_LINES] + [f"... and {plural(more, 'more malformed line')}"]
    checked = {"checked": len(files), "method": "parse", "failures": failures}
    return {**report, "verify": checked if verify else None}


def _files_report(
    source: Any, paths: list[str], kind: str, file_format: str, sample: bool
) -> Report:
    """Record files with no manifest: their counts, and record 0, decoded when it is a
    tpufeed.codec record (rows of Parquet files are shown as they are read)."""
    record = source[0] if sample and len(source) else None
    first: Report | None = None
    if isinstance(record, dict):  # a format of rows (Parquet): shown like a decoded record
        first = {"num_bytes": None, "fields": record_fields(record), "head_hex": None}
    elif record is not None:
        try:
            decoded = codec.decode(record)
        except CodecError:
            first = {"num_bytes": len(record), "fields": None, "head_hex": record[:64].hex()}
        else:
            first = {"num_bytes": len(record), "fields": record_fields(decoded), "head_hex": None}
    files = [
        {"path": f.path, "num_records": len(f), "num_bytes": None, "crc32c": None}
        for f in source.files
    ]
    return _report(kind, paths, file_format, files, first, num_records=len(source))


def _dataset_report(source: Any, paths: list[str], sample: bool) -> Report:
    """A built dataset (a `ManifestSource`): its manifest's summary and schema, and record 0
    (which checks shard 0) if `sample`."""
    m = source.manifest
    files = [{k: s[k] for k in ("path", "num_records", "num_bytes", "crc32c")} for s in m["shards"]]
    first = None
    if sample and len(source):
        record = source[0]
        fields = record_fields(record if isinstance(record, dict) else {"": record})
        first = {"num_bytes": None, "fields": fields, "head_hex": None}
    return _report(
        "dataset",
        paths,
        m["file_format"],
        files,
        first,
        num_records=m["num_records"],
        record_format=m["record_format"],
        manifest=source.manifest_path,
        tpufeed_version=m.get("tpufeed_version"),
        num_bytes=sum(f["num_bytes"] for f in files),
        features=dict(source.schema or {}),
        classes=m.get("build", {}).get("classes"),
        statistics=_statistics(source),
    )


def _statistics(source: Any) -> Report:
    """The build's statistics as the document holds them; damaged ones as not recorded,
    saying what is wrong (the records may still read: --verify checks them)."""
    try:
        statistics: Report = source.statistics.to_json()
    except CorruptDataError as e:
        return {"recorded": False, "why": f"damaged: {e}"}
    return statistics


def _report(
    kind: str, paths: list[str], file_format: str, files: list[dict], first: Any, **more: Any
) -> Report:
    """The document's keys in their order; null where `more` does not give them."""
    return {
        "kind": kind,
        "paths": list(paths),
        "file_format": file_format,
        "record_format": more.get("record_format"),
        "manifest": more.get("manifest"),
        "tpufeed_version": more.get("tpufeed_version"),
        "num_records": more["num_records"],
        "num_bytes": more.get("num_bytes"),
        "files": files,
        "features": more.get("features", {}),
        "classes": more.get("classes"),
        "statistics": more.get("statistics"),
        "record_0": first,
        "verify": None,
    }


def _verify_dataset(source: Any) -> Report:
    """Every shard's size, CRC32C and record count against the manifest."""
    failures = []
    for shard in source.files:
        try:
            shard.verify()  # size and CRC32C
            shard.read(np.arange(min(len(shard), 1)))  # opening it compares the record count
        except TpufeedError as e:
            failures.append(str(e))
    return {"checked": len(source.files), "method": "manifest", "failures": failures}


def _verify_files(source: Any) -> Report:
    """Every record of every file read (the formats' own checksums); no manifest to compare."""
    failures = []
    for shard in source.files:
        try:
            for start in range(0, len(shard), _VERIFY_BATCH):
                shard.read(np.arange(start, min(len(shard), start + _VERIFY_BATCH)))
        except TpufeedError as e:
            failures.append(str(e))
    return {"checked": len(source.files), "method": "read", "failures": failures}


def _refuse_unfinished(path: str) -> None:
    """A local folder with no manifest and no record files: what it is, not a bare not-found."""
    from tpufeed.sources.built.manifest import MANIFEST_NAME

    if (
        "://" in path
        or not os.path.isdir(path)
        or os.path.exists(os.path.join(path, MANIFEST_NAME))
    ):
        return
    temporary = sorted(n for n in os.listdir(path) if n.startswith(".tpufeed-tmp-"))
    if temporary:
        raise SourceNotFoundError(
            f"{path}: no {MANIFEST_NAME}, and a build's temporary folder "
            f"{temporary[0]} is there: a build into it did not finish",
            path=path,
        )
    extensions = " or ".join(ext for fmt in FORMATS.values() for ext in fmt.extensions)
    raise SourceNotFoundError(
        f"{path}: no {MANIFEST_NAME} and no {extensions} files: not a dataset", path=path
    )


def add_parser(sub: Subcommands) -> None:
    """`tpufeed inspect PATHS [--format F] [--verify] [--json]`."""
    inspect = sub.add_parser(
        "inspect",
        help="what a dataset or record files hold: counts, schema, a sample record",
        description="Describes a dataset built by `tpufeed build` (a folder or gs:// prefix), a "
        "plain folder of shards, record files (ArrayRecord, TFRecord, Parquet), WebDataset tar "
        "shards, an MDS folder, or the JSONL and CSV files `tpufeed build` reads; --verify "
        "checks them. A built dataset's statistics follow its schema: record sizes and each "
        "field's lengths (quantiles, a histogram by powers of two), each field's count, types "
        "and shape, each input file's records ('not recorded' for a dataset built before "
        "them).",
    )
    inspect.add_argument(
        "paths",
        nargs="+",
        help="a dataset or MDS folder, or record, tar, JSONL or CSV files or globs",
    )
    inspect.add_argument(
        "--format",
        choices=INPUT_FORMATS,
        default=None,
        help="of the files (default: from the file extension; a folder with index.json is MDS)",
    )
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="check every shard (a dataset's: size, crc32c and record count "
        "against its manifest; plain files: every record read; JSONL and CSV: every line "
        "parsed); exit 1 naming the shards or lines that fail",
    )
    add_json_option(inspect, INSPECT)
    inspect.set_defaults(run=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Prints what `args.paths` hold (or its JSON document); with --verify, exit 1 naming the
    shards that fail."""
    report = inspect_report(args.paths, args.format, verify=args.verify)
    failures = report["verify"]["failures"] if args.verify else []
    if args.json:
        INSPECT.emit(report)
    else:
        for line in report_lines(report):
            print(line)
        for failure in failures:
            print(f"  FAILED {failure}")
    if failures:
        listed = "in the JSON's verify.failures" if args.json else "above as FAILED"
        what = "line" if report["file_format"] in TEXT_FORMATS else "shard"
        print(
            f"tpufeed: error: {plural(len(failures), what)} failed verification (listed {listed})",
            file=sys.stderr,
        )
        return 1
    return 0
