"""The `tpufeed` command."""

from __future__ import annotations

import argparse
import sys

from tpufeed.bench import add_parser as add_bench_parser
from tpufeed.errors import TpufeedError


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
    from tpufeed.sources.manifest import is_dataset_path

    if len(args.paths) == 1 and is_dataset_path(args.paths[0]):
        print(_describe_dataset(args.paths[0]))
        return 0
    from tpufeed.inspect import describe

    print(describe(args.paths, args.format))
    return 0


def _describe_dataset(path: str) -> str:
    """A built dataset: its manifest's summary, schema, and record 0 (its shard verified)."""
    import json

    import numpy as np

    from tpufeed.sources.manifest import ManifestSource

    source = ManifestSource(path)
    m = source.manifest
    total_bytes = sum(s["num_bytes"] for s in m["shards"])
    lines = [f"{source.manifest_path}: {m['num_records']:,} records in {len(m['shards'])} "
             f"{m['file_format']} shards, {total_bytes:,} bytes ({m['record_format']} records, "
             f"built by tpufeed {m.get('tpufeed_version')})"]
    lines += [f"  {s['path']}: {s['num_records']:,} records, {s['num_bytes']:,} bytes, "
              f"crc32c {s['crc32c']}" for s in m["shards"]]
    for key, spec in (source.schema or {}).items():
        lines.append(f"  schema {key}: {json.dumps(spec, sort_keys=True)}")
    if len(source):
        lines.append("record 0:")
        for key, value in (source[0].items() if isinstance(source[0], dict) else [("", source[0])]):
            if isinstance(value, np.ndarray):
                lines.append(f"  {key}: {value.dtype}{list(value.shape)}")
            else:
                lines.append(f"  {key}: {type(value).__name__} = {value!r:.60}")
    return "\n".join(lines)


def _build(args: argparse.Namespace) -> int:
    import logging

    from tpufeed.beam import BuildConfig, build

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tpufeed: %(message)s"))
    logger = logging.getLogger("tpufeed")
    logger.addHandler(handler)
    saved = logger.level, logger.propagate
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    logger.propagate = False
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)  # we report it
    try:
        config = BuildConfig(inputs=tuple(args.input), output=args.output,
                             num_shards=args.num_shards, file_format=args.format,
                             transforms=tuple(args.transform), max_bad=args.max_bad,
                             beam_args=tuple(args.beam_args))
        summary = build(config)
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate = saved
    rate = summary["records_out"] / summary["seconds"] if summary["seconds"] else 0.0
    print(f"records in     {summary['records_in']:,}")
    print(f"records out    {summary['records_out']:,}")
    print(f"skipped        {summary['skipped']:,} (bad records, --max-bad {args.max_bad})")
    print(f"filtered       {summary['filtered']:,} (dropped by --transform)")
    print(f"shards         {summary['shards']} {args.format}")
    print(f"bytes          {summary['bytes']:,}")
    print(f"time           {summary['seconds']:.1f} s ({rate:,.0f} records/s)")
    print(f"dataset        {summary['output']}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    import time

    from tpufeed.storage.cache import ShardCache

    cache = ShardCache(args.dir)
    if args.action == "clear":
        removed, freed, skipped = cache.clear()
        kept = f"; {skipped} entries in use by a running job were kept" if skipped else ""
        print(f"removed {removed} files ({freed:,} bytes of shards) from {cache.root}{kept}")
        return 0
    entries = cache.entries()
    for e in entries:
        read = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_read)) \
            if e.last_read else "never read"
        state = "cached" if e.complete else "partial"
        print(f"{e.size:>15,}  {state:<8} {read:<19}  {e.url or e.key}")
    total = sum(e.size for e in entries)
    print(f"{len(entries)} shards, {total:,} bytes in {cache.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from tpufeed import __version__

    parser = argparse.ArgumentParser(prog="tpufeed", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tpufeed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    quick = sub.add_parser("quickstart", help="build a small real dataset locally and train from it")
    quick.add_argument("--output", default="tpufeed-quickstart", help="dataset folder")
    quick.add_argument("--epochs", type=int, default=20)
    quick.set_defaults(run=_quickstart)
    inspect = sub.add_parser("inspect", help="record counts and a sample record of data files")
    inspect.add_argument("paths", nargs="+", help="files or globs")
    inspect.add_argument("--format", choices=["array_record", "tfrecord"], default=None,
                         help="default: from the file extension")
    inspect.set_defaults(run=_inspect)
    add_bench_parser(sub)
    build = sub.add_parser(
        "build", help="preprocess raw files into verified shards and a manifest (Apache Beam)",
        description="Reads --input files, applies --transform functions and writes balanced "
                    "shards plus manifest.json. Other --options are Beam pipeline options "
                    "(e.g. --runner DataflowRunner --project P --region R --temp_location "
                    "gs://...); the default runner is in-process.")
    build.add_argument("--input", action="extend", nargs="+", required=True,
                       help="paths or globs: .jsonl, .csv, .tfrecord (tf.train.Example), "
                            ".array_record, or a folder of images")
    build.add_argument("--output", required=True, help="dataset folder (local or gs://)")
    build.add_argument("--num-shards", type=int, default=1)
    build.add_argument("--format", choices=["array_record", "tfrecord"], default="array_record")
    build.add_argument("--transform", action="append", default=[],
                       help="module:function or path/to/file.py:function; repeat to chain")
    build.add_argument("--max-bad", type=int, default=0,
                       help="skip (and count) up to N malformed records instead of failing")
    build.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    build.set_defaults(run=_build)
    cache = sub.add_parser("cache", help="show or empty the local shard cache of gs:// files")
    cache.add_argument("action", choices=["ls", "clear"],
                       help="ls: cached shards, sizes, last reads; clear: remove all not in use")
    cache.add_argument("--dir", default=None,
                       help="cache directory (default: $TPUFEED_CACHE_DIR, else ~/.cache/tpufeed)")
    cache.set_defaults(run=_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "build":
        args.beam_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.run(args)
    except TpufeedError as e:
        print(f"tpufeed: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
