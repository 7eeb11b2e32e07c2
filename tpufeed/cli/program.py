"""The `tpufeed` program: one parser made of every command's, and `main`, which runs the
command asked for and ends it in one line and an exit code (an error, Ctrl-C, a closed pipe).

>>> main(["inspect", "data/train"])   # doctest: +SKIP
0
"""

# Only the standard library at the top: a Ctrl-C that lands while a command's modules load
# must reach main()'s handler, which prints one line instead of a traceback.
from __future__ import annotations

import argparse
import os
import signal
import sys

__all__ = ["build_parser", "main"]

_EXIT_ERROR = 2  # an error explained in one line; argparse exits 2 on a usage mistake too
_EXIT_SIGNALLED = 128  # + the signal, as a shell reports a process it stopped: 130 for Ctrl-C
_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as for `yes | head`


_EPILOG = """\
examples:
  tpufeed quickstart                       build a small dataset and train on it with JAX
  tpufeed inspect data/train               what a dataset or record files hold
  tpufeed bench my_pipeline.py             measure your pipeline and name its bottleneck
  tpufeed build --input 'raw/*.jsonl' --output data/train --transform prep.py:parse
  tpufeed trace merge host*.json -o pod.json   the hosts' timelines as one, on one clock

docs: docs/quickstart.md in tpufeed's source; every command and option in
docs/reference/cli.md"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of `tpufeed` and, from each command's module, its subcommand's."""
    from tpufeed import __version__
    from tpufeed.cli import bench, build, cache, inspection, quickstart
    from tpufeed.cli.arguments import HelpFormatter, Parser
    from tpufeed.cli.trace import command as trace

    parser = Parser(
        prog="tpufeed",
        description="Build, inspect and measure input pipelines for JAX, TensorFlow and "
        "PyTorch: `tpufeed COMMAND --help` says what each command takes.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tpufeed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (quickstart, inspection, bench, build, cache, trace):
        command.add_parser(sub)
    for subparser in sub.choices.values():
        subparser.formatter_class = HelpFormatter
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the subcommand `name`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise LookupError(name)  # build_parser always adds the subcommands


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
        from tpufeed.cli.arguments import unrecognized

        command = _subparser(parser, args.command)
        command.error(unrecognized(command, extra))
    try:
        code = args.run(args)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return code
    except TpufeedError as e:
        print(f"tpufeed: error: {e}", file=sys.stderr)
        return _EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Runs `tpufeed ARGV` (None: the process's arguments) and returns its exit code."""
    try:  # around the imports too: a Ctrl-C just after the start is one line, exit 130
        return _run(argv)
    except KeyboardInterrupt as e:  # Ctrl-C; or SIGTERM, which `tpufeed build` takes alike
        number = getattr(e, "signum", signal.SIGINT)
        word = "terminated" if number == signal.SIGTERM else "interrupted"
        print(f"tpufeed: {word}{f': {e}' if str(e) else ''}", file=sys.stderr)
        return _EXIT_SIGNALLED + int(number)
    except BrokenPipeError:  # the reader went away (`tpufeed inspect ... | head`)
        _silence_stdout()
        return _EXIT_BROKEN_PIPE
