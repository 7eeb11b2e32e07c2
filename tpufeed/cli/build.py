"""`tpufeed build`: preprocess raw files into verified shards and a manifest, with Apache Beam.

The options are tpufeed's `BuildConfig`; any other `--option` goes to Beam as a pipeline
option (`--runner DataflowRunner --project P ...`), and one that neither knows is refused as
a usage error. Beam is imported when the command runs, not when its parser is made.

>>> main(["build", "--input", "raw/*.jsonl", "--output", "data/train"])   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from tpufeed.cli.arguments import Subcommands, non_negative_int, positive_int, positive_or_auto
from tpufeed.cli.json_output import BUILD, add_json_option
from tpufeed.sources.built.record_formats import RECORD_FORMATS
from tpufeed.sources.formats import writable_formats

__all__ = ["add_parser", "run_command"]


def add_parser(sub: Subcommands) -> None:
    """`tpufeed build --input ... --output DIR [options] [Beam options]`."""
    build = sub.add_parser(
        "build",
        help="preprocess raw files into verified shards and a manifest (Apache Beam)",
        description="Reads --input files, applies --transform functions and writes balanced "
        "shards plus manifest.json. Other --options are Beam pipeline options "
        "(e.g. --runner DataflowRunner --project P --region R --temp_location "
        "gs://...); the default runner is in-process. An option that neither "
        "tpufeed nor Beam knows is refused. ArrayRecord shards are at least 128 KiB "
        "long (the format pads its footer to 64 KiB blocks); small local shards "
        "keep that padding as holes, which take no disk space.",
    )
    # In the order --help lists them.
    _folder_options(build)
    _scale_options(build)
    _format_options(build)
    _record_options(build)
    build.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_json_option(build, BUILD)
    build.set_defaults(run=run_command, parser=build)


def _folder_options(build: argparse.ArgumentParser) -> None:
    """Where the records come from and the dataset goes."""
    build.add_argument(
        "--input",
        action="extend",
        nargs="+",
        required=True,
        help="paths or globs: .jsonl, .csv (every column a str: cast in a --transform, "
        "e.g. tpufeed.transforms.Cast), .parquet, .tfrecord/.tfr (tf.train.Example), "
        ".array_record/.ar, or a folder of images (class folders give label; the "
        "manifest lists the classes)",
    )
    build.add_argument("--output", required=True, help="dataset folder (local, gs:// or s3://)")
    build.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the dataset already in --output (refused otherwise)",
    )


def _scale_options(build: argparse.ArgumentParser) -> None:
    """How the work is cut: shards, worker processes, and the sizes of shards and blocks."""
    build.add_argument(
        "--num-shards",
        type=positive_int,
        default=None,
        help="shards to write (default: one per ~256 MB of input); more than the "
        "records the build makes is refused",
    )
    build.add_argument(
        "--workers",
        type=positive_or_auto,
        default="auto",
        metavar="N",
        help="N or auto: local worker processes (Beam's multi_processing mode); auto runs "
        "one per CPU where the input is large enough to gain (about 48 MB a worker), else "
        "1; the shards are byte-identical for any count",
    )
    build.add_argument(
        "--max-shard-mb",
        type=positive_int,
        default=2048,
        help="refuse a --num-shards that makes a shard larger than this (one "
        "worker holds a shard while writing it)",
    )
    build.add_argument(
        "--block-mb",
        type=positive_int,
        default=64,
        help="inputs are read in blocks of about this size, in parallel",
    )
    build.add_argument(
        "--worker-start-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="with a portable runner (PortableRunner, Flink, Spark), fail if its workers "
        "cannot run a one-element check job within this time (they lack tpufeed, or "
        "never start)",
    )


def _format_options(build: argparse.ArgumentParser) -> None:
    """How the shards and the records in them are stored."""
    build.add_argument(
        "--format",
        choices=writable_formats(),
        default=None,
        help="shard file format (default: tfrecord with --record-format "
        "tf_example, which tf.data reads; else array_record)",
    )
    build.add_argument(
        "--record-format",
        choices=sorted(RECORD_FORMATS),
        default="codec",
        help="how dict records are stored: codec (tpufeed's, exact dtypes and "
        "shapes) or tf_example (tf.train.Example, readable without "
        "tpufeed; arrays flattened with a <key>/shape feature)",
    )


def _record_options(build: argparse.ArgumentParser) -> None:
    """What happens to each record: the transforms, and how many bad ones are skipped."""
    build.add_argument(
        "--transform",
        action="append",
        default=[],
        help="module:function or path/to/file.py:function, or one made with literal "
        'arguments: \'tpufeed.transforms:Cast({"label": "int32"})\'; repeat to chain',
    )
    build.add_argument(
        "--max-bad",
        type=non_negative_int,
        default=0,
        help="skip (and count) up to N bad records instead of failing: malformed ones, "
        "those a transform fails on, and those whose keys or kinds of value differ from "
        "the first record's",
    )


def run_command(args: argparse.Namespace) -> int:
    """Builds the dataset that `args` describe and prints what went in and came out. SIGTERM
    stops it as Ctrl-C does: what it wrote is removed, one line says so, exit status 143."""
    from tpufeed.beam.build_failures import terminating_as_interrupt

    with terminating_as_interrupt():
        return _build(args)


def _build(args: argparse.Namespace) -> int:
    from tpufeed.beam import BuildConfig, build

    _refuse_unknown_options(args)
    file_format = args.format or (
        "tfrecord" if args.record_format == "tf_example" else "array_record"
    )
    with _progress_to_stderr(args.quiet):
        config = BuildConfig(
            inputs=tuple(args.input),
            output=args.output,
            num_shards=args.num_shards,
            file_format=file_format,
            workers=args.workers,
            block_bytes=args.block_mb << 20,
            max_shard_bytes=args.max_shard_mb << 20,
            worker_start_timeout=args.worker_start_timeout,
            record_format=args.record_format,
            transforms=tuple(args.transform),
            max_bad=args.max_bad,
            beam_args=tuple(args.beam_args),
            overwrite=args.overwrite,
        )
        summary = build(config)
    rate = summary["records_out"] / summary["seconds"] if summary["seconds"] else 0.0
    if args.json:
        BUILD.emit(
            {
                **summary,
                "records_per_s": rate,
                "file_format": file_format,
                "record_format": args.record_format,
            }
        )
    else:
        _print_summary(summary, args, file_format, rate)
    return 0


def _refuse_unknown_options(args: argparse.Namespace) -> None:
    """Extra options of `tpufeed build` go to Beam, which silently drops those it does not
    know: a usage error instead, naming the option meant where one is close."""
    import difflib

    from tpufeed.beam import beam_option_names, unknown_beam_args

    unknown = unknown_beam_args(args.beam_args)
    if not unknown:
        return
    ours = [
        o for action in args.parser._actions for o in action.option_strings if o.startswith("--")
    ]
    problems, previous_was_option = [], False
    for token in unknown:
        if not token.startswith("-"):
            if not previous_was_option:  # else the value of an option refused already
                problems.append(f"unexpected argument {token!r}")
            previous_was_option = False
            continue
        name = token.split("=", 1)[0]
        dashed = "--" + name.lstrip("-").replace("_", "-")
        close = (
            [dashed]
            if dashed in ours
            else difflib.get_close_matches(name, ours, n=1, cutoff=0.7)
            or difflib.get_close_matches(name, beam_option_names(), n=1, cutoff=0.8)
        )
        problems.append(
            f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else "")
        )
        previous_was_option = "=" not in token
    args.parser.error(
        "; ".join(problems) + ". Options that are not tpufeed build's go to Apache "
        "Beam, and Beam has none of these names either"
    )


@contextlib.contextmanager
def _progress_to_stderr(quiet: bool) -> Iterator[None]:
    """tpufeed's progress lines on stderr (warnings only if `quiet`), and Beam's own logging
    down to what the user needs, for the length of the build."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tpufeed: %(message)s"))
    logger = logging.getLogger("tpufeed")
    logger.addHandler(handler)
    saved = logger.level, logger.propagate
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)  # we report it
    # --workers: Beam's worker processes warn of a missing cache folder they do not need, and
    # log a failed step's traceback, which the runner raises here again (and we in one line).
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(
        logging.CRITICAL
    )
    # --workers N passes Beam --direct_num_workers=N with tpufeed's own worker processes, which
    # Beam's runner takes for a mode without parallelism and warns about.
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").setLevel(
        logging.ERROR
    )
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate = saved


def _print_summary(
    summary: dict[str, Any], args: argparse.Namespace, file_format: str, rate: float
) -> None:
    print(f"records in     {summary['records_in']:,}")
    print(f"records out    {summary['records_out']:,}")
    print(f"skipped        {summary['skipped']:,} (bad records, --max-bad {args.max_bad})")
    print(f"filtered       {summary['filtered']:,} (dropped by --transform)")
    print(f"shards         {summary['shards']} {file_format} ({args.record_format} records)")
    print(f"bytes          {summary['bytes']:,}")
    print(
        f"time           {summary['seconds']:.1f} s ({rate:,.0f} records/s): the plan, Beam's "
        "pipeline and the checks (the command's start-up before them is not counted)"
    )
    print(f"dataset        {summary['output']}")
