"""What `tpufeed bench TARGET` runs: the Dataset a `file.py:function` returns, or a dataset
folder or record files read, shuffled, mapped by the --transform functions and batched.

Mistakes a user makes here are named before anything runs: a `.py` file without the function
to call, and a decode transform on a dataset folder, whose records arrive already decoded.

>>> make_target(args)   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import ast
import os
import traceback
from typing import Any

from tpufeed.cli.inputs import TEXT_FORMATS, input_format, open_samples, text_samples
from tpufeed.dataset import Dataset
from tpufeed.errors import CodecError, InvalidArgumentError, TpufeedError
from tpufeed.ops.user_functions import is_interruption
from tpufeed.storage.backends import is_remote_url

__all__ = ["load_callable", "make_target"]


def load_callable(spec: str, option: str = "--transform") -> Any:
    """`module:function` (found in the current directory too) or `path/to/file.py:function`
    (whose imports find the modules next to it)."""
    from tpufeed.beam.read.user_transforms import load_transform

    return load_transform(spec, option)


def make_target(args: argparse.Namespace) -> Dataset:
    """The Dataset `args.target` names, as bench runs it (--workers / --prefetch not applied)."""
    target = args.target
    if ":" in target and not is_remote_url(target) and not os.path.exists(target):
        ds = _called(target)
        if not isinstance(ds, Dataset):
            raise InvalidArgumentError(
                f"{target} returned {type(ds).__name__}, not a tpufeed.Dataset"
            )
        return ds
    if target.endswith(".py"):
        raise InvalidArgumentError(_without_function(target))
    from tpufeed.cli.inspection import folder_shards
    from tpufeed.sources.built.manifest import is_dataset_path
    from tpufeed.sources.formats import FORMATS, get_format, guess_format
    from tpufeed.storage.local import expand_paths

    other = input_format([target], getattr(args, "format", None))
    if other is not None and other not in FORMATS:  # tars, an MDS folder, JSONL, CSV
        ds = _samples(target, other)
        _check_decoded(ds, target, args.transform)
        return _prepared(ds, args)
    plain = folder_shards(target)
    if plain is not None:  # a folder of shards with no manifest, as `tpufeed quickstart` writes
        file_format, files = plain
        fmt = get_format(file_format)
    elif is_dataset_path(target):
        ds = Dataset.open(target)
        _check_decoded(ds, target, args.transform)
        return _prepared(ds, args)
    else:
        files = expand_paths([target])
        fmt = (
            get_format(args.format, "--format")
            if getattr(args, "format", None)
            else guess_format(files[0])
        )
    return _prepared(getattr(Dataset, fmt.constructor)(files), args)


def _samples(target: str, name: str) -> Dataset:
    """WebDataset tars or an MDS folder read in place; JSONL or CSV records held in memory."""
    if name in TEXT_FORMATS:
        return Dataset.from_sequence(text_samples([target], name))
    return Dataset.from_source(open_samples([target], name))


def _without_function(target: str) -> str:
    """A `.py` target without `:function`: what to add, with the file's functions named."""
    try:
        with open(target, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    except (OSError, SyntaxError, ValueError):
        names = []
    found = f" (functions in {target}: {', '.join(names)})" if names else ""
    return (
        f"{target} is a Python file: name the function that returns the Dataset: "
        f"{target}:{names[0] if len(names) == 1 else 'make_dataset'}{found}"
    )


def _called(target: str) -> Any:
    """What the function named by `target` returns; what it raises (a bug in the user's
    file, or arguments it needs) is one error naming the target, with its traceback."""
    make = load_callable(target, "target")
    try:
        return make()
    except TpufeedError:
        raise
    except BaseException as e:  # SystemExit & co. too: the command ends in one named error
        if is_interruption(e):
            raise
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise InvalidArgumentError(
            f"target {target} raised {type(e).__name__}: {e} (it is called with no "
            f"arguments and must return a tpufeed.Dataset)\n{tb}"
        ) from e


def _check_decoded(ds: Dataset, target: str, transforms: list[str]) -> None:
    """A dataset folder's records arrive decoded (dicts of arrays), as do samples of tars, MDS,
    JSONL and CSV: the first --transform is tried on one of them, and one that wants bytes (a
    decode) is named with the fix."""
    if not transforms or len(ds.source) == 0:
        return
    spec = transforms[0]
    fn, record = load_callable(spec), ds.source[0]
    try:
        fn(record)
    except (CodecError, TypeError) as e:
        if isinstance(e, TypeError) and "bytes" not in str(e):
            return  # another mistake: the run reports it with the record and traceback
        raise InvalidArgumentError(
            f"--transform {spec} wants bytes ({type(e).__name__}: {e}), but the records of "
            f"{target} arrive already decoded, as dicts of arrays: leave out --transform {spec}"
        ) from None
    except BaseException as e:  # the run raises it again, naming the record, with the traceback
        if is_interruption(e):
            raise


def _prepared(ds: Dataset, args: argparse.Namespace) -> Dataset:
    """`ds` shuffled, with the --transform maps, batched and repeated: what bench runs."""
    ds = ds.shuffle(0)
    for spec in args.transform:
        ds = ds.map(load_callable(spec))
    return ds.batch(args.batch_size).repeat()
