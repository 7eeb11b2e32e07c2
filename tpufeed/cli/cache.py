"""`tpufeed cache ls | clear`: the local shard cache that remote shards (gs://, s3://,
https://, hf://) are read through.

`ls` lists each cached shard (size, whether complete, last read, its URL); `clear`
removes every file no running job holds, and says how many it kept.

>>> main(["cache", "clear", "--dir", "/mnt/ssd/tpufeed"])   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import TYPE_CHECKING

from tpufeed.cli.arguments import Subcommands
from tpufeed.cli.json_output import CACHE_CLEAR, CACHE_LS, add_json_option
from tpufeed.errors import SourceError, SourceNotFoundError, plural

if TYPE_CHECKING:
    from tpufeed.storage.cache.shard_cache import ShardCache

__all__ = ["add_parser", "run_command"]


def add_parser(sub: Subcommands) -> None:
    """`tpufeed cache {ls,clear} [--dir DIR]`."""
    cache = sub.add_parser(
        "cache",
        help="show or empty the local shard cache of remote files",
        description="The local shard cache that gs://, s3://, https:// and hf:// files are "
        "read through: `ls` lists each cached shard (size, complete or partial, last read, "
        "its URL), `clear` removes every file no running job holds.",
    )
    cache.add_argument(
        "action",
        choices=["ls", "clear"],
        help="ls: cached shards, sizes, last reads; clear: remove all not in use",
    )
    cache.add_argument(
        "--dir",
        default=None,
        type=_directory,
        help="cache directory (default: $TPUFEED_CACHE_DIR, else ~/.cache/tpufeed)",
    )
    add_json_option(cache, CACHE_LS, CACHE_CLEAR)
    cache.set_defaults(run=run_command)


def _directory(text: str) -> str:
    """A --dir value; an empty one (an unset shell variable, `--dir "$X"`) is refused rather
    than taken as the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "expected a directory, got an empty string (an unset shell variable?)"
        )
    return text


def run_command(args: argparse.Namespace) -> int:
    """Lists or clears the cache in `args.dir`; a directory that cannot be made or written is
    one line naming it, not a traceback."""
    from tpufeed.storage.cache.shard_cache import ShardCache

    cache = ShardCache(args.dir)
    if args.dir is not None and not os.path.isdir(cache.root):
        what = "is not a folder" if os.path.lexists(cache.root) else "does not exist"
        raise SourceNotFoundError(
            f"--dir {args.dir} {what}, so it holds no shard cache; the cache that gs://, s3://, "
            "https:// and hf:// reads fill is the cache_dir= they were given, else "
            "$TPUFEED_CACHE_DIR, else ~/.cache/tpufeed (`tpufeed cache ls` without --dir)",
            path=cache.root,
        )
    try:
        return _clear(cache, args.json) if args.action == "clear" else _list(cache, args.json)
    except OSError as e:  # e.g. /proc, where nothing can be made: one line, not a traceback
        where = f" ({e.filename})" if e.filename and e.filename != cache.root else ""
        raise SourceError(
            f"cannot {args.action} the shard cache directory {cache.root}{where}: "
            f"{e.strerror or e}; pass --dir (or set $TPUFEED_CACHE_DIR to) a "
            "directory tpufeed can create and write",
            path=cache.root,
        ) from e


def _clear(cache: ShardCache, as_json: bool) -> int:
    removed, freed, skipped = cache.clear()
    if as_json:
        CACHE_CLEAR.emit(
            {
                "dir": cache.root,
                "removed_files": removed,
                "freed_bytes": freed,
                "kept_in_use": skipped,
            }
        )
        return 0
    kept = (
        f"; {plural(skipped, 'entry', 'entries')} in use by a running job "
        f"{'was' if skipped == 1 else 'were'} kept"
        if skipped
        else ""
    )
    print(f"removed {plural(removed, 'file')} ({freed:,} bytes of shards) from {cache.root}{kept}")
    return 0


def _list(cache: ShardCache, as_json: bool) -> int:
    entries = cache.entries()
    total = sum(e.size for e in entries)
    if as_json:
        listed = [dataclasses.asdict(e) for e in entries]
        CACHE_LS.emit(
            {"dir": cache.root, "entries": listed, "num_entries": len(listed), "total_bytes": total}
        )
        return 0
    for e in entries:
        read = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_read))
            if e.last_read
            else "never read"
        )
        state = "cached" if e.complete else "partial"
        print(f"{e.size:>15,}  {state:<8} {read:<19}  {e.url or e.key}")
    empty = (
        "" if os.path.isdir(cache.root) else " (no cache there yet: nothing was read through it)"
    )
    print(f"{plural(len(entries), 'shard')}, {total:,} bytes in {cache.root}{empty}")
    return 0
