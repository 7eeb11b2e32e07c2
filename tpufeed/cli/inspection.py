"""`tpufeed inspect`: what is in a built dataset, a plain folder of shards, or record files;
with `verify=True`, whether every shard is intact.

`sources.manifest` (and the remote-storage code it imports) is imported where a dataset is
opened, not at the top: `tpufeed --help` makes this command's parser without it.

>>> lines, failures = inspect_paths(["data/train"], verify=True)  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from tpufeed import codec
from tpufeed.cli.arguments import Subcommands
from tpufeed.errors import (
    CodecError,
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
    "describe",
    "describe_dataset",
    "folder_shards",
    "inspect_paths",
    "open_source",
    "run_command",
]

_VERIFY_BATCH = 1024


def open_source(paths: list[str], fmt: str | None) -> ShardedSource[Any]:
    """The record files `paths` (paths or globs) in format `fmt` (None: told by the first
    file's name), as one source; only that format's reader is imported."""
    files = expand_paths(paths)
    file_format = get_format(fmt, "--format") if fmt is not None else guess_format(files[0])
    source: ShardedSource[Any] = file_format.open_source(files)
    return source


def folder_shards(path: str) -> tuple[str, list[str]] | None:
    """(format, sorted record files) of a local folder with no manifest that holds record files
    of one format (as `tpufeed quickstart` writes); None for anything else."""
    from tpufeed.sources.manifest import MANIFEST_NAME

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


def describe(paths: list[str], fmt: str | None = None) -> str:
    """Record files: their counts and record 0, decoded when it is a tpufeed.codec record (rows
    of Parquet files are shown as they are read)."""
    return _describe_files(open_source(paths, fmt))


def _describe_files(source: Any, sample: bool = True) -> str:
    lines = [f"{plural(len(source.files), 'file')}, {plural(len(source), 'record')}"]
    lines += [f"  {f.path}: {plural(len(f), 'record')}" for f in source.files]
    if sample and len(source):
        record = source[0]
        if isinstance(record, dict):  # a format of rows (Parquet): shown like a decoded record
            lines.append(f"record 0: {plural(len(record), 'field')}")
            lines += _fields(record)
            return "\n".join(lines)
        lines.append(f"record 0: {plural(len(record), 'byte')}")
        try:
            decoded = codec.decode(record)
        except CodecError:
            lines.append(f"  raw bytes: {record[:64]!r}{'...' if len(record) > 64 else ''}")
        else:
            lines += _fields(decoded)
    return "\n".join(lines)


def describe_dataset(source: Any, sample: bool = True) -> str:
    """A built dataset (a `ManifestSource`): its manifest's summary, schema, and record 0 (which
    checks shard 0) if `sample`."""
    m = source.manifest
    total_bytes = sum(s["num_bytes"] for s in m["shards"])
    lines = [
        f"{source.manifest_path}: {plural(m['num_records'], 'record')} in "
        f"{plural(len(m['shards']), m['file_format'] + ' shard')}, "
        f"{plural(total_bytes, 'byte')} ({m['record_format']} records, built by tpufeed "
        f"{m.get('tpufeed_version')}); counts and crc32c as the manifest lists them "
        "(--verify checks them)"
    ]
    lines += [
        f"  {s['path']}: {plural(s['num_records'], 'record')}, "
        f"{plural(s['num_bytes'], 'byte')}, crc32c {s['crc32c']}"
        for s in m["shards"]
    ]
    for key, spec in (source.schema or {}).items():
        lines.append(f"  schema {key}: {json.dumps(spec, sort_keys=True)}")
    if sample and len(source):
        record = source[0]
        lines.append("record 0:")
        lines += _fields(record if isinstance(record, dict) else {"": record})
    return "\n".join(lines)


def _fields(record: dict) -> list[str]:
    lines = []
    for key, value in record.items():
        if isinstance(value, np.ndarray):
            lines.append(f"  {key}: {value.dtype}{list(value.shape)}")
        else:
            lines.append(f"  {key}: {type(value).__name__} = {value!r:.60}")
    return lines


def _verify_dataset(source: Any) -> tuple[str, list[str]]:
    """Every shard's size, CRC32C and record count against the manifest."""
    failures = []
    for shard in source.files:
        try:
            shard.verify()  # size and CRC32C
            shard.read(np.arange(min(len(shard), 1)))  # opening it compares the record count
        except TpufeedError as e:
            failures.append(str(e))
    checked = plural(len(source.files), "shard")
    return (
        f"verify: {checked}: size, crc32c and record count checked against the manifest",
        failures,
    )


def _verify_files(source: Any) -> tuple[str, list[str]]:
    """Every record of every file read (the formats' own checksums); no manifest to compare."""
    failures = []
    for shard in source.files:
        try:
            for start in range(0, len(shard), _VERIFY_BATCH):
                shard.read(np.arange(start, min(len(shard), start + _VERIFY_BATCH)))
        except TpufeedError as e:
            failures.append(str(e))
    checked = plural(len(source.files), "file")
    return f"verify: {checked}: every record read (no manifest, so no crc32c to compare)", failures


def inspect_paths(
    paths: list[str], fmt: str | None = None, verify: bool = False
) -> tuple[list[str], list[str]]:
    """(lines to print, verification failures) for `tpufeed inspect PATHS`."""
    from tpufeed.sources.manifest import MANIFEST_NAME, ManifestSource, is_dataset_path

    header: list[str] = []
    source: ShardedSource[Any]
    if len(paths) == 1 and (plain := folder_shards(paths[0])) is not None:
        file_format, files = plain
        found = FORMATS[file_format]
        glob = os.path.join(paths[0], f"*{found.extension}")
        header = [
            f"{paths[0]}: a plain folder of {plural(len(files), found.title + ' file')} "
            f"with no {MANIFEST_NAME} (not written by `tpufeed build`); open it with "
            f"Dataset.{found.constructor}({glob!r})"
        ]
        source = open_source(files, file_format)
    elif len(paths) == 1 and is_dataset_path(paths[0]):
        _refuse_unfinished(paths[0])
        source = ManifestSource(paths[0])
    else:
        source = open_source(paths, fmt)
    describe_source = describe_dataset if hasattr(source, "manifest") else _describe_files
    if not verify:
        return [*header, describe_source(source)], []
    # Verified first, so that a damaged first shard is listed with the others.
    summary, failures = (_verify_dataset if hasattr(source, "manifest") else _verify_files)(source)
    return [*header, describe_source(source, sample=not failures), summary], failures


def _refuse_unfinished(path: str) -> None:
    """A local folder with no manifest and no record files: what it is, not a bare not-found."""
    from tpufeed.sources.manifest import MANIFEST_NAME

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
    """`tpufeed inspect PATHS [--format F] [--verify]`."""
    inspect = sub.add_parser(
        "inspect",
        help="what a dataset or record files hold: counts, schema, a sample record",
        description="Describes a dataset built by `tpufeed build` (a folder or gs:// prefix), a "
        "plain folder of shards, or record files; --verify checks them.",
    )
    inspect.add_argument("paths", nargs="+", help="a dataset folder, or record files or globs")
    inspect.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default=None,
        help="of record files (default: from the file extension)",
    )
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="check every shard (a dataset's: size, crc32c and record count "
        "against its manifest; plain files: every record read); exit 1 "
        "naming the shards that fail",
    )
    inspect.set_defaults(run=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Prints what `args.paths` hold; with --verify, exit 1 naming the shards that fail."""
    lines, failures = inspect_paths(args.paths, args.format, verify=args.verify)
    for line in lines:
        print(line)
    for failure in failures:
        print(f"  FAILED {failure}")
    if failures:
        print(
            f"tpufeed: error: {plural(len(failures), 'shard')} failed verification (listed "
            "above as FAILED)",
            file=sys.stderr,
        )
        return 1
    return 0
