"""The argument types and the help formatter every `tpufeed` command shares.

A number option takes one of the `type=` converters below: a value it refuses (NaN and the
infinities included) is a usage error that quotes it, before the command starts any work.

>>> parser.add_argument("--batches", type=positive_int, default=None)   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeAlias

__all__ = [
    "HelpFormatter",
    "Subcommands",
    "non_negative_int",
    "non_negative_seconds",
    "number_type",
    "positive_int",
    "positive_seconds",
]

# What `ArgumentParser.add_subparsers` returns: each command module adds its parser to it.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def number_type(
    parse: Callable[[str], float], accept: Callable[[float], bool], wanted: str
) -> Callable[[str], float]:
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


positive_int = number_type(int, lambda v: v >= 1, "a whole number >= 1")
non_negative_int = number_type(int, lambda v: v >= 0, "a whole number >= 0")
positive_seconds = number_type(
    float, lambda v: math.isfinite(v) and v > 0, "a finite number of seconds > 0"
)
non_negative_seconds = number_type(
    float, lambda v: math.isfinite(v) and v >= 0, "a finite number of seconds >= 0"
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or default == [] or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)
