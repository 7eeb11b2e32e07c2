"""What `tpufeed inspect` and `tpufeed bench` read besides built datasets and the shard formats
of the registry (`sources.formats`): WebDataset tar shards, MDS folders, and the JSONL and CSV
files `tpufeed build` takes as input, named by `--format` or told from the path.

WebDataset and MDS are read as `Dataset.from_webdataset` and `Dataset.from_mds` read them
(samples are dicts). JSONL and CSV have no index: inspect streams them, counting records and
naming each malformed line as the build does (`beam/read/inputs.py`); bench holds their records
in memory, so it takes at most `MAX_TEXT_BYTES` of them (above that, build shards first).

>>> input_format(["shards/train-{000000..000009}.tar"], None)
'webdataset'
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tpufeed.errors import CorruptDataError, InvalidArgumentError, plural
from tpufeed.sources.formats import FORMATS

if TYPE_CHECKING:
    from tpufeed.sources.sharded import ShardedSource

__all__ = [
    "INPUT_FORMATS",
    "MAX_TEXT_BYTES",
    "TEXT_FORMATS",
    "input_format",
    "open_samples",
    "text_files",
    "text_records",
    "text_samples",
]

# Read by their own sources: samples are dicts (not in the registry: tpufeed never writes them).
SAMPLE_FORMATS = {"webdataset": "WebDataset", "mds": "MDS"}
# The build's text inputs: read line by line, with no index.
TEXT_FORMATS = {"jsonl": "JSONL", "csv": "CSV"}
INPUT_FORMATS = sorted([*FORMATS, *SAMPLE_FORMATS, *TEXT_FORMATS])
MAX_TEXT_BYTES = 1 << 30

_TAR_ENDINGS = (".tar", ".tgz", ".tar.gz")
_TEXT_ENDINGS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}


def input_format(paths: list[str], fmt: str | None) -> str | None:
    """The format `--format` names, else the one `paths` say (an MDS folder: its index.json;
    tar shards, JSONL and CSV: the first path's ending, globs and brace ranges included);
    None where the registry or a dataset folder decides, as before."""
    if fmt is not None:
        return fmt
    first = paths[0].rstrip("/")
    if os.path.isdir(first) and os.path.isfile(os.path.join(first, "index.json")):
        return "mds"
    if os.path.basename(first) == "index.json":
        return "mds"
    name = first.lower()
    if name.endswith(_TAR_ENDINGS):
        return "webdataset"
    return next((kind for end, kind in _TEXT_ENDINGS.items() if name.endswith(end)), None)


def open_samples(paths: list[str], name: str) -> ShardedSource[Any]:
    """WebDataset tar shards (paths, globs or brace ranges) or an MDS folder, as one source."""
    if name == "webdataset":
        from tpufeed.sources.webdataset.tar import WebDatasetSource

        return WebDatasetSource(paths)
    from tpufeed.sources.mds.source import MDSSource

    if len(paths) != 1:
        raise InvalidArgumentError(
            f"an MDS dataset is one folder (its index.json, or sub-folders each with one), "
            f"got {plural(len(paths), 'path')}: {', '.join(paths)}"
        )
    folder = paths[0]
    if os.path.basename(folder.rstrip("/")) == "index.json":
        folder = os.path.dirname(folder.rstrip("/"))
    return MDSSource(folder)


def text_files(paths: list[str]) -> list[str]:
    """The files `paths` (paths or globs, local or in a store) name, in order."""
    from tpufeed.storage.local import expand_paths

    return expand_paths(paths)


def text_records(path: str, name: str) -> Iterator[tuple[str, Any]]:
    """(origin, record) for each record of one JSONL or CSV file, read as `tpufeed build`
    reads it; a malformed record is a `beam.read.inputs.Malformed` naming its line."""
    from tpufeed.beam.read.inputs import InputFile, read_input

    for _, origin, record in read_input(InputFile(path, name)):
        yield origin, record


def text_samples(paths: list[str], name: str) -> list[Any]:
    """Every record of the JSONL or CSV files `paths`, in memory (what bench shuffles and
    batches); a malformed line is a CorruptDataError naming it, and files over
    `MAX_TEXT_BYTES` in all are refused before any is read."""
    from tpufeed.beam.read.inputs import Malformed

    files = text_files(paths)
    local = [f for f in files if "://" not in f]
    size = sum(os.path.getsize(f) for f in local)
    if size > MAX_TEXT_BYTES:
        raise InvalidArgumentError(
            f"{', '.join(paths)}: {size:,} bytes of {TEXT_FORMATS[name]}, more than bench "
            f"holds in memory ({MAX_TEXT_BYTES:,}: {TEXT_FORMATS[name]} has no index to read "
            "by); build shards first (`tpufeed build --input ...`) and bench the dataset folder"
        )
    records = []
    for path in files:
        for _, record in text_records(path, name):
            if isinstance(record, Malformed):
                raise CorruptDataError(
                    f"{record} (tpufeed inspect --verify lists every one)", path=path
                )
            records.append(record)
    return records
