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
    print(f"throughput     {result['records_per_s']:,.0f} records/s (pipeline + numpy training step)")
    print(f"input wait     {result['input_wait_fraction']:.1%} of the loop's time")
    print(f"test accuracy  {result['test_accuracy']:.3f}")
    print(f"total          {result['seconds']:.1f} s")
    ok = result["exactly_once_every_epoch"] and result["resume_matches"]
    return 0 if ok else 1


def _inspect(args: argparse.Namespace) -> int:
    from tpufeed.inspect import describe

    print(describe(args.paths, args.format))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpufeed", description=__doc__)
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TpufeedError as e:
        print(f"tpufeed: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
