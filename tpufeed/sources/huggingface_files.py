"""A Hugging Face `IterableDataset` (`load_dataset(..., streaming=True)`) read in place: the
Parquet files it streams from, opened as `Dataset.from_parquet` opens them.

A streaming dataset has no random access, so tpufeed reads the files under it instead, with a
global shuffle and exact resume: those on the Hub through `hf://` (the commit `datasets`
resolved stays pinned), local ones as they are. What it streams must be those files as stored:

- a Parquet dataset (the Hub's datasets without a loading script, `load_dataset("parquet",
  data_files=...)`), its `select_columns` and the builder's `columns=` kept as columns;
- its format None or "numpy" (rows come as from `from_parquet`: numpy values, `str`, None);
  a framework's or a table's format is refused as `from_huggingface` refuses it on a
  `datasets.Dataset`.

Anything `datasets` would do to the rows on the way (`map`, `filter`, `shuffle`, `take`,
`skip`, `cast_column`, `split_dataset_by_node`, `interleave_datasets`, ...), row groups picked
by the builder, and files of other formats (JSON, CSV, tar, Arrow, a script's) are refused with
the line that reads the files in tpufeed: `Dataset.from_parquet("hf://datasets/...")` over the
files themselves, or over the Parquet copy the Hub converts every dataset into
(`@refs%2Fconvert%2Fparquet/CONFIG/SPLIT/*.parquet`); the rest is then done with tpufeed's own
`map`, `filter`, `shuffle` and `shard`.

>>> hf = datasets.load_dataset("org/name", split="train", streaming=True)  # doctest: +SKIP
>>> parquet_files(hf)  # doctest: +SKIP
(['hf://datasets/org/name@5a1b.../data/train-00000-of-00002.parquet', ...], None)
"""

from __future__ import annotations

import os
from typing import Any

from tpufeed.errors import InvalidArgumentError, TpufeedError
from tpufeed.storage.backends import is_remote_url
from tpufeed.storage.local import resolve_paths
from tpufeed.storage.retry import RetryPolicy

__all__ = ["kept_columns", "parquet_files", "reading_line"]

# What each of `datasets`' example iterables stands for, as the user wrote it.
WRAPPERS = {
    "MappedExamplesIterable": "map() (rename_column and remove_columns are maps too)",
    "FilteredExamplesIterable": "filter()",
    "BufferShuffledExamplesIterable": "shuffle()",
    "InterleavedShardsExamplesIterable": "shuffle()",
    "TakeExamplesIterable": "take()",
    "SkipExamplesIterable": "skip()",
    "StepExamplesIterable": "shard() or split_dataset_by_node()",
    "RepeatExamplesIterable": "repeat()",
    "FormattedExamplesIterable": "a format applied before map()",
    "CyclingMultiSourcesExamplesIterable": "interleave_datasets()",
    "RandomlyCyclingMultiSourcesExamplesIterable": "interleave_datasets(probabilities=...)",
    "VerticallyConcatenatedMultiSourcesExamplesIterable": "concatenate_datasets()",
    "HorizontallyConcatenatedMultiSourcesExamplesIterable": "concatenate_datasets(axis=1)",
}
_READABLE = {None, "numpy", "python"}
_PARQUET_BUILDER = "datasets.packaged_modules.parquet.parquet"


def parquet_files(dataset: Any) -> tuple[list[str], list[str] | None]:
    """(the Parquet files `dataset` streams, the columns it keeps: None for all), or an
    InvalidArgumentError naming what it does on the way and the line that reads its files."""
    ex, columns = dataset._ex_iterable, None
    if type(ex).__name__ == "SelectColumnsIterable":
        columns, ex = list(ex.column_names), ex.ex_iterable
    builder, files = _source(ex)
    kind = type(ex).__name__
    if kind in WRAPPERS:
        raise _refused(dataset, files, builder, f"applies {WRAPPERS[kind]}")
    if builder is None or _rows_function(ex) is None:
        raise _refused(dataset, files, builder, f"streams rows {_made_by(ex)}")
    if type(builder).__module__ != _PARQUET_BUILDER:
        raise _refused(dataset, files, builder, f"streams {type(builder).__name__} files")
    groups = ex.kwargs.get("row_groups_list") or []
    if any(group is not None for group in groups):
        raise _refused(dataset, files, builder, "reads chosen row groups of its files")
    _check_settings(dataset, files, builder)
    config_columns = getattr(builder.config, "columns", None)
    if columns is None and config_columns is not None:
        columns = list(config_columns)
    return files, columns


def kept_columns(kept: list[str] | None, wanted: Any) -> list[str] | None:
    """The columns to read: `wanted` (from_huggingface's `columns=`), each one the dataset
    keeps, else those it keeps (None: all)."""
    from tpufeed.sources.parquet.source import check_columns

    names = check_columns(wanted)
    if names is None or kept is None:
        return names if names is not None else kept
    missing = [name for name in names if name not in kept]
    if missing:
        raise InvalidArgumentError(
            f"the IterableDataset has no column {', '.join(map(repr, missing))}; it keeps "
            f"{kept} (select_columns)"
        )
    return names


def _source(ex: Any) -> tuple[Any, list[str]]:
    """The builder whose method makes the rows under `ex` (None if none), and the files it
    reads; through the iterables that wrap it (map, filter, ...)."""
    fn = _rows_function(ex)
    inner = getattr(ex, "ex_iterable", None)
    if fn is None and inner is not None:
        return _source(inner)
    kwargs = getattr(ex, "kwargs", None) or {}
    listed = kwargs.get("files") or []
    files = [item for group in listed for item in (group if isinstance(group, list) else [group])]
    if not all(isinstance(f, str) for f in files):
        files = []
    return getattr(fn, "__self__", None), files


def _rows_function(ex: Any) -> Any:
    return getattr(ex, "generate_tables_fn", None) or getattr(ex, "generate_examples_fn", None)


def _made_by(ex: Any) -> str:
    fn = _rows_function(ex)
    name = getattr(fn, "__qualname__", type(ex).__name__)
    if name.startswith("Dataset."):
        return "of a datasets.Dataset (to_iterable_dataset())"
    return f"made by {name}, not files"


def _check_settings(dataset: Any, files: list[str], builder: Any) -> None:
    """Refuses what the dataset or its builder would change in the rows as stored."""
    if getattr(dataset, "_distributed", None) is not None:
        raise _refused(dataset, files, builder, "is split by node (split_dataset_by_node)")
    formatting = getattr(dataset, "_formatting", None)
    kind = getattr(formatting, "format_type", None)
    if kind not in _READABLE:
        raise _refused(dataset, files, builder, f"is formatted as {kind!r}")
    if getattr(builder.config, "filters", None) is not None:
        raise _refused(dataset, files, builder, "filters its rows (filters=)")
    if getattr(builder.config, "features", None) is not None:
        raise _refused(dataset, files, builder, "casts its columns to the features= given")
    stored = builder.info.features
    features = dataset._info.features
    if stored is not None and features is not None:
        changed = [name for name in features if stored.get(name) != features[name]]
        if changed:
            raise _refused(dataset, files, builder, f"casts column {', '.join(changed)}")
    odd = [f for f in files if "::" in f or (":" in f.split("/")[0] and not is_remote_url(f))]
    if odd or not files:
        which = f"files tpufeed cannot open ({odd[0]})" if odd else "no files it names"
        raise _refused(dataset, files, builder, f"reads {which}")


def _refused(dataset: Any, files: list[str], builder: Any, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"from_huggingface: the IterableDataset {what}; tpufeed reads the Parquet files under "
        "a streaming dataset as stored and does not replay that. Instead: "
        f"{reading_line(dataset, files, builder)}, then map, filter, shuffle and shard in tpufeed"
    )


def reading_line(dataset: Any, files: list[str], builder: Any = None) -> str:
    """The tpufeed line that reads what `dataset` streams: its own Parquet files, else the
    Hub's Parquet copy of its repository, else (local files of another format) the advice to
    load it without streaming."""
    parquet = builder is not None and type(builder).__module__ == _PARQUET_BUILDER
    if files and parquet:
        return f"tpufeed.Dataset.from_parquet({_pattern(files)!r})"
    repo = next((_repo_of(f) for f in files if f.startswith("hf://datasets/")), None)
    if repo is None:
        repo = getattr(builder, "repo_id", None)
    if repo:
        config = getattr(getattr(dataset, "_info", None), "config_name", None) or "default"
        split = str(getattr(dataset, "_split", None) or "train").split("[")[0]
        converted = f"hf://datasets/{repo}@refs%2Fconvert%2Fparquet/{config}/{split}/*.parquet"
        return f"tpufeed.Dataset.from_parquet({converted!r}) (the Hub's Parquet copy of it)"
    return (
        "pass the datasets.Dataset it streams (load_dataset without streaming=True) to "
        "from_huggingface: its Arrow files are read in place"
    )


def _repo_of(url: str) -> str:
    """ORG/NAME of an hf://datasets/ORG/NAME[@REV]/... URL."""
    org, name = url.removeprefix("hf://datasets/").split("/")[:2]
    return f"{org}/{name.partition('@')[0]}"


def _pattern(files: list[str]) -> str | list[str]:
    """One glob naming exactly `files` where they differ only in the middle (shards of one
    split: `data/train-*-of-00004.parquet`) and it matches no other file (checked by a listing,
    bounded by 10 s), else the list itself."""
    if len(files) == 1:
        return files[0]
    prefix = os.path.commonprefix(files).rstrip("0123456789")  # train-0000 -> train-
    suffix = os.path.commonprefix([f[len(prefix) :][::-1] for f in files])[::-1]
    suffix = suffix.lstrip("0123456789")
    middles = [f[len(prefix) : len(f) - len(suffix)] for f in files]
    if any("/" in m or not m for m in middles) or any(c in prefix + suffix for c in "*?["):
        return list(files)
    pattern = f"{prefix}*{suffix}"
    try:
        matched = resolve_paths(pattern, RetryPolicy.within(10))
    except (TpufeedError, OSError):  # the listing failed: the files as they are
        return list(files)
    names = [item if isinstance(item, str) else item.url for item in matched]
    return pattern if sorted(names) == sorted(files) else list(files)
