"""`tpufeed inspect` for people: the lines it prints, worded from the `tpufeed.inspect/1`
document that `inspect_report` gathers (and `--json` prints as it is).

>>> print("\\n".join(report_lines(inspect_report(["data/train"]))))   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from typing import Any

from tpufeed.cli.statistics_text import statistics_lines
from tpufeed.errors import plural
from tpufeed.sources.formats import FORMATS

__all__ = ["report_lines"]


def report_lines(report: dict[str, Any]) -> list[str]:
    """The lines `tpufeed inspect` prints for `report` (without --verify's failures, which
    the command lists after them)."""
    lines = _folder_header(report) if report["kind"] == "folder" else []
    if report["kind"] == "dataset":
        lines += _dataset_lines(report)
    else:
        lines += _files_lines(report)
    checked = report["verify"]
    if checked is not None and checked["method"] == "manifest":
        lines.append(
            f"verify: {plural(checked['checked'], 'shard')}: size, crc32c and record count "
            "checked against the manifest"
        )
    elif checked is not None and checked["method"] == "parse":
        lines.append(f"verify: {plural(checked['checked'], 'file')}: every line parsed")
    elif checked is not None:
        lines.append(
            f"verify: {plural(checked['checked'], 'file')}: every record read (no manifest, so "
            "no crc32c to compare)"
        )
    return lines


def _folder_header(report: dict[str, Any]) -> list[str]:
    from tpufeed.sources.built.manifest import MANIFEST_NAME  # loaded already: the folder was read

    folder, found = report["paths"][0], FORMATS[report["file_format"]]
    glob = os.path.join(folder, f"*{found.extension}")
    return [
        f"{folder}: a plain folder of {plural(len(report['files']), found.title + ' file')} "
        f"with no {MANIFEST_NAME} (not written by `tpufeed build`); open it with "
        f"Dataset.{found.constructor}({glob!r})"
    ]


def _files_lines(report: dict[str, Any]) -> list[str]:
    files = report["files"]
    lines = [f"{plural(len(files), 'file')}, {plural(report['num_records'], 'record')}"]
    lines += [f"  {f['path']}: {plural(f['num_records'], 'record')}" for f in files]
    first = report["record_0"]
    if first is None:
        return lines
    if first["num_bytes"] is None:  # a format of rows (Parquet): shown like a decoded record
        lines.append(f"record 0: {plural(len(first['fields']), 'field')}")
    else:
        lines.append(f"record 0: {plural(first['num_bytes'], 'byte')}")
    if first["fields"] is not None:
        lines += _field_lines(first["fields"])
    else:
        more = "..." if first["num_bytes"] > 64 else ""
        lines.append(f"  raw bytes: {bytes.fromhex(first['head_hex'])!r}{more}")
    return lines


def _dataset_lines(report: dict[str, Any]) -> list[str]:
    files = report["files"]
    lines = [
        f"{report['manifest']}: {plural(report['num_records'], 'record')} in "
        f"{plural(len(files), report['file_format'] + ' shard')}, "
        f"{plural(report['num_bytes'], 'byte')} ({report['record_format']} records, built by "
        f"tpufeed {report['tpufeed_version']}); counts and crc32c as the manifest lists them"
        + ("" if report["verify"] else " (--verify checks them)")
    ]
    lines += [
        f"  {f['path']}: {plural(f['num_records'], 'record')}, "
        f"{plural(f['num_bytes'], 'byte')}, crc32c {f['crc32c']}"
        for f in files
    ]
    for key, spec in report["features"].items():
        lines.append(f"  schema {key}: {json.dumps(spec, sort_keys=True)}")
    classes = report["classes"]
    if isinstance(classes, list):
        lines.append(f"  classes (label i is the i-th): {', '.join(classes)}")
    elif classes:
        lines += [f"  classes of {folder}: {', '.join(names)}" for folder, names in classes.items()]
    lines += statistics_lines(report["statistics"])
    if report["record_0"] is not None:
        lines.append("record 0:")
        lines += _field_lines(report["record_0"]["fields"])
    return lines


def _field_lines(fields: dict[str, dict[str, Any]]) -> list[str]:
    return [
        f"  {key}: {f['dtype']}{f['shape']}{' = ' + f['repr'] if 'repr' in f else ''}"
        if "dtype" in f
        else f"  {key}: {f['type']} = {f['repr']}"
        for key, f in fields.items()
    ]
