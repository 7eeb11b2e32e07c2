"""The `tpufeed` command."""

# Only the standard library at the top: a Ctrl-C that lands while a command's modules load
# must reach main()'s handler, which prints one line instead of a traceback.
from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpufeed.storage.cache import ShardCache

_EXIT_ERROR = 2  # an error explained in one line; argparse exits 2 on a usage mistake too
_EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process stopped by Ctrl-C
_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as for `yes | head`


def _number_type(parse: Callable[[str], float], accept: Callable[[float], bool],
                 wanted: str) -> Callable[[str], float]:
    """An argparse `type=` that refuses, as a usage error quoting the value, what `accept`
    does not take (NaN and infinities included, where `accept` says so)."""
    def convert(text: str) -> float:
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value
    convert.__name__ = wanted  # argparse names the type by it in some messages
    return convert


positive_int = _number_type(int, lambda v: v >= 1, "a whole number >= 1")
non_negative_int = _number_type(int, lambda v: v >= 0, "a whole number >= 0")
positive_seconds = _number_type(float, lambda v: math.isfinite(v) and v > 0,
                                "a finite number of seconds > 0")
non_negative_seconds = _number_type(float, lambda v: math.isfinite(v) and v >= 0,
                                    "a finite number of seconds >= 0")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or default == [] or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _quickstart(args: argparse.Namespace) -> int:
    from tpufeed.quickstart import run

    result = run(args.output, epochs=args.epochs)
    print(f"dataset        {result['dataset']} ({result['shards']} ArrayRecord shards, "
          f"{result['train_records']} training records: scikit-learn digits)")
    print(f"epochs         {result['epochs']}, every record exactly once per epoch: "
          f"{result['exactly_once_every_epoch']}")
    print(f"resume         iterator rebuilt from a mid-epoch state continues exactly: "
          f"{result['resume_matches']}")
    print(f"throughput     {result['records_per_s']:,.0f} records/s (pipeline + jitted JAX train "
          f"step on {result['devices']} device(s))")
    print(f"input wait     {result['input_wait_fraction']:.1%} of the loop's time")
    print(f"test accuracy  {result['test_accuracy']:.3f}")
    print(f"total          {result['seconds']:.1f} s")
    ok = result["exactly_once_every_epoch"] and result["resume_matches"]
    return 0 if ok else 1


def _inspect(args: argparse.Namespace) -> int:
    from tpufeed.errors import plural
    from tpufeed.inspect import inspect_paths

    lines, failures = inspect_paths(args.paths, args.format, verify=args.verify)
    for line in lines:
        print(line)
    for failure in failures:
        print(f"  FAILED {failure}")
    if failures:
        print(f"tpufeed: error: {plural(len(failures), 'shard')} failed verification (listed "
              "above as FAILED)", file=sys.stderr)
        return 1
    return 0


def _refuse_unknown_options(args: argparse.Namespace) -> None:
    """Extra options of `tpufeed build` go to Beam, which silently drops those it does not
    know: a usage error instead, naming the option meant where one is close."""
    import difflib

    from tpufeed.beam import beam_option_names, unknown_beam_args

    unknown = unknown_beam_args(args.beam_args)
    if not unknown:
        return
    ours = [o for action in args.parser._actions for o in action.option_strings  # noqa: SLF001
            if o.startswith("--")]
    problems, previous_was_option = [], False
    for token in unknown:
        if not token.startswith("-"):
            if not previous_was_option:  # else the value of an option refused already
                problems.append(f"unexpected argument {token!r}")
            previous_was_option = False
            continue
        name = token.split("=", 1)[0]
        dashed = "--" + name.lstrip("-").replace("_", "-")
        close = ([dashed] if dashed in ours
                 else difflib.get_close_matches(name, ours, n=1, cutoff=0.7)
                 or difflib.get_close_matches(name, beam_option_names(), n=1, cutoff=0.8))
        problems.append(f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else ""))
        previous_was_option = "=" not in token
    args.parser.error("; ".join(problems) + ". Options that are not tpufeed build's go to Apache "
                      "Beam, and Beam has none of these names either")


def _build(args: argparse.Namespace) -> int:
    import logging

    from tpufeed.beam import BuildConfig, build

    _refuse_unknown_options(args)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tpufeed: %(message)s"))
    logger = logging.getLogger("tpufeed")
    logger.addHandler(handler)
    saved = logger.level, logger.propagate
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    logger.propagate = False
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)  # we report it
    # --workers: Beam's worker processes warn of a missing cache folder they do not need.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
    # --workers N passes Beam --direct_num_workers=N with tpufeed's own worker processes, which
    # Beam's runner takes for a mode without parallelism and warns about.
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").setLevel(
        logging.ERROR)
    try:
        file_format = args.format or ("tfrecord" if args.record_format == "tf_example"
                                      else "array_record")
        config = BuildConfig(inputs=tuple(args.input), output=args.output,
                             num_shards=args.num_shards, file_format=file_format,
                             workers=args.workers, block_bytes=args.block_mb << 20,
                             max_shard_bytes=args.max_shard_mb << 20,
                             record_format=args.record_format,
                             transforms=tuple(args.transform), max_bad=args.max_bad,
                             beam_args=tuple(args.beam_args), overwrite=args.overwrite)
        summary = build(config)
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate = saved
    rate = summary["records_out"] / summary["seconds"] if summary["seconds"] else 0.0
    print(f"records in     {summary['records_in']:,}")
    print(f"records out    {summary['records_out']:,}")
    print(f"skipped        {summary['skipped']:,} (bad records, --max-bad {args.max_bad})")
    print(f"filtered       {summary['filtered']:,} (dropped by --transform)")
    print(f"shards         {summary['shards']} {file_format} ({args.record_format} records)")
    print(f"bytes          {summary['bytes']:,}")
    print(f"time           {summary['seconds']:.1f} s ({rate:,.0f} records/s)")
    print(f"dataset        {summary['output']}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from tpufeed.errors import SourceError
    from tpufeed.storage.cache import ShardCache

    cache = ShardCache(args.dir)
    try:
        return _cache_action(cache, args.action)
    except OSError as e:  # e.g. /proc, where nothing can be made: one line, not a traceback
        where = f" ({e.filename})" if e.filename and e.filename != cache.root else ""
        raise SourceError(f"cannot {args.action} the shard cache directory {cache.root}{where}: "
                          f"{e.strerror or e}; pass --dir (or set $TPUFEED_CACHE_DIR to) a "
                          "directory tpufeed can create and write", path=cache.root) from e


def _cache_action(cache: ShardCache, action: str) -> int:
    import time

    from tpufeed.errors import plural

    if action == "clear":
        removed, freed, skipped = cache.clear()
        kept = (f"; {plural(skipped, 'entry', 'entries')} in use by a running job "
                f"{'was' if skipped == 1 else 'were'} kept" if skipped else "")
        print(f"removed {plural(removed, 'file')} ({freed:,} bytes of shards) from "
              f"{cache.root}{kept}")
        return 0
    entries = cache.entries()
    for e in entries:
        read = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_read)) \
            if e.last_read else "never read"
        state = "cached" if e.complete else "partial"
        print(f"{e.size:>15,}  {state:<8} {read:<19}  {e.url or e.key}")
    total = sum(e.size for e in entries)
    print(f"{plural(len(entries), 'shard')}, {total:,} bytes in {cache.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from tpufeed import __version__
    from tpufeed.bench import add_parser as add_bench_parser
    from tpufeed.sources.formats import FORMATS, writable_formats
    from tpufeed.sources.record_formats import RECORD_FORMATS

    parser = argparse.ArgumentParser(prog="tpufeed", description=__doc__,
                                     formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"tpufeed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    quick = sub.add_parser("quickstart", help="build a small real dataset locally and train from it")
    quick.add_argument("--output", default="tpufeed-quickstart", help="folder for its shards")
    quick.add_argument("--epochs", type=positive_int, default=20, help="training epochs")
    quick.set_defaults(run=_quickstart)
    inspect = sub.add_parser(
        "inspect", help="what a dataset or record files hold: counts, schema, a sample record",
        description="Describes a dataset built by `tpufeed build` (a folder or gs:// prefix), a "
                    "plain folder of shards, or record files; --verify checks them.")
    inspect.add_argument("paths", nargs="+", help="a dataset folder, or record files or globs")
    inspect.add_argument("--format", choices=sorted(FORMATS), default=None,
                         help="of record files (default: from the file extension)")
    inspect.add_argument("--verify", action="store_true",
                         help="check every shard (a dataset's: size, crc32c and record count "
                              "against its manifest; plain files: every record read); exit 1 "
                              "naming the shards that fail")
    inspect.set_defaults(run=_inspect)
    add_bench_parser(sub)
    build = sub.add_parser(
        "build", help="preprocess raw files into verified shards and a manifest (Apache Beam)",
        description="Reads --input files, applies --transform functions and writes balanced "
                    "shards plus manifest.json. Other --options are Beam pipeline options "
                    "(e.g. --runner DataflowRunner --project P --region R --temp_location "
                    "gs://...); the default runner is in-process. An option that neither "
                    "tpufeed nor Beam knows is refused. ArrayRecord shards are at least 128 KiB "
                    "long (the format pads its footer to 64 KiB blocks); small local shards "
                    "keep that padding as holes, which take no disk space.")
    build.add_argument("--input", action="extend", nargs="+", required=True,
                       help="paths or globs: .jsonl, .csv, .tfrecord/.tfr (tf.train.Example), "
                            ".array_record/.ar, or a folder of images")
    build.add_argument("--output", required=True, help="dataset folder (local or gs://)")
    build.add_argument("--overwrite", action="store_true",
                       help="replace the dataset already in --output (refused otherwise)")
    build.add_argument("--num-shards", type=positive_int, default=None,
                       help="shards to write (default: one per ~256 MB of input)")
    build.add_argument("--workers", type=positive_int, default=1,
                       help="local worker processes (Beam's multi_processing mode); the "
                            "shards are byte-identical for any count")
    build.add_argument("--max-shard-mb", type=positive_int, default=2048,
                       help="refuse a --num-shards that makes a shard larger than this (one "
                            "worker holds a shard while writing it)")
    build.add_argument("--block-mb", type=positive_int, default=64,
                       help="inputs are read in blocks of about this size, in parallel")
    build.add_argument("--format", choices=writable_formats(), default=None,
                       help="shard file format (default: tfrecord with --record-format "
                            "tf_example, which tf.data reads; else array_record)")
    build.add_argument("--record-format", choices=sorted(RECORD_FORMATS), default="codec",
                       help="how dict records are stored: codec (tpufeed's, exact dtypes and "
                            "shapes) or tf_example (tf.train.Example, readable without "
                            "tpufeed; arrays flattened with a <key>/shape feature)")
    build.add_argument("--transform", action="append", default=[],
                       help="module:function or path/to/file.py:function; repeat to chain")
    build.add_argument("--max-bad", type=non_negative_int, default=0,
                       help="skip (and count) up to N malformed records instead of failing")
    build.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    build.set_defaults(run=_build, parser=build)
    cache = sub.add_parser("cache", help="show or empty the local shard cache of gs:// files")
    cache.add_argument("action", choices=["ls", "clear"],
                       help="ls: cached shards, sizes, last reads; clear: remove all not in use")
    cache.add_argument("--dir", default=None,
                       help="cache directory (default: $TPUFEED_CACHE_DIR, else ~/.cache/tpufeed)")
    cache.set_defaults(run=_cache)
    for command in sub.choices.values():
        command.formatter_class = _HelpFormatter
    return parser


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the exit's flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _run(argv: list[str] | None) -> int:
    from tpufeed.errors import TpufeedError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "build":
        args.beam_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        code = args.run(args)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return code
    except TpufeedError as e:
        print(f"tpufeed: error: {e}", file=sys.stderr)
        return _EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    try:  # around the imports too: a Ctrl-C just after the start is one line, exit 130
        return _run(argv)
    except KeyboardInterrupt as e:
        print(f"tpufeed: interrupted{f': {e}' if str(e) else ''}", file=sys.stderr)
        return _EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`tpufeed inspect ... | head`)
        _silence_stdout()
        return _EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
