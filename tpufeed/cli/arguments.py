"""The argument types and the help formatter every `tpufeed` command shares.

A number option takes one of the `type=` converters below: a value it refuses (NaN and the
infinities included) is a usage error that quotes it, before the command starts any work.

>>> parser.add_argument("--batches", type=positive_int, default=None)   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, TypeAlias

__all__ = [
    "HelpFormatter",
    "Parser",
    "Subcommands",
    "close_match",
    "count_or_auto",
    "non_negative_int",
    "non_negative_seconds",
    "number_type",
    "positive_int",
    "positive_or_auto",
    "positive_seconds",
    "unrecognized",
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


def _count_or_auto(text: str, lowest: int) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = lowest - 1
    if value < lowest:
        hint = " (did you mean auto?)" if close_match(text, ["auto"]) else ""
        raise argparse.ArgumentTypeError(
            f"expected a whole number >= {lowest} or auto, got {text!r}{hint}"
        )
    return value


def count_or_auto(text: str) -> int | str:
    """`--workers` / `--prefetch`: a whole number >= 0, or "auto" (a near miss is named)."""
    return _count_or_auto(text, 0)


def positive_or_auto(text: str) -> int | str:
    """`build --workers`: a whole number >= 1, or "auto" (a near miss is named)."""
    return _count_or_auto(text, 1)


count_or_auto.__name__ = "a whole number >= 0 or auto"
positive_or_auto.__name__ = "a whole number >= 1 or auto"


def close_match(word: str, options: Iterable[str]) -> str | None:
    """The one of `options` that `word` most likely misspells, if one is close."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return close[0] if close else None


def _meant_missing(parser: argparse.ArgumentParser, given: list[str]) -> str:
    """` (--ouput: did you mean --output?)` for each given option that `parser` does not know
    and that is close to one of its required options."""
    known = {o for action in parser._actions for o in action.option_strings}
    required = [o for a in parser._actions if a.required for o in a.option_strings]
    notes = []
    for token in given:
        name = token.split("=", 1)[0]
        meant = close_match(name, required) if name.startswith("--") and name not in known else None
        if meant:
            notes.append(f"{name}: did you mean {meant}?")
    return f" ({'; '.join(notes)})" if notes else ""


def unrecognized(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """The usage error for arguments `parser` does not take, naming the option meant where
    one is close (`--step-tme` -> `--step-time`)."""
    ours = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    notes = []
    for token in extra:
        name = token.split("=", 1)[0]
        meant = close_match(name, ours) if name.startswith("-") else None
        if meant:
            notes.append(f"{name}: did you mean {meant}?")
    return f"unrecognized arguments: {' '.join(extra)}" + (
        f" ({'; '.join(notes)})" if notes else ""
    )


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose "invalid choice" error names the choice meant, where one is
    close (`--format arayrecord` -> array_record), as does its "required" error where a given
    option misspells the one missing (`--ouput` -> --output: `tpufeed build` passes options it
    does not know to Beam, so the misspelling itself is no error there); subcommands' parsers
    are of its class too."""

    _given: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required:"):
            message += _meant_missing(self, self._given)
        super().error(message)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            meant = close_match(str(value), map(str, choices))
            if meant is not None:
                listed = ", ".join(map(repr, choices))
                raise argparse.ArgumentError(
                    action,
                    f"invalid choice: {value!r} (did you mean {meant!r}? choose from {listed})",
                )
        super()._check_value(action, value)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, except where there is none to show; a description
    or epilog written in lines (examples) keeps its lines, one written as a sentence is
    wrapped to the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or default == [] or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)
