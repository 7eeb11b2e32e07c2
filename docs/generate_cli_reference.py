"""Writes docs/reference/cli.md from the `tpufeed` argument parser and the `--json` schemas.

    python docs/generate_cli_reference.py           # rewrite the page
    python docs/generate_cli_reference.py --check   # exit 1 if the page is out of date

tests/repository/test_docs.py runs the check, so a changed option or schema that is not
written into the page fails the tests.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"

INTRO = """\
# Command line

<!-- Written by docs/generate_cli_reference.py from tpufeed/cli/ (the argument parser and
json_output.py's schemas): edit those and run `python docs/generate_cli_reference.py`. -->

`tpufeed COMMAND [OPTIONS]`, or `python -m tpufeed.cli COMMAND [OPTIONS]`. `tpufeed --version`
prints the version; `tpufeed COMMAND --help` lists a command's options with their defaults.

| Exit status | Means |
| --- | --- |
| 0 | done |
| 1 | `inspect --verify`: a shard failed (each named); `quickstart`: its exactly-once or resume check failed |
| 2 | a usage error, or an error explained in one line (`tpufeed: error: ...`) |
| 130 | interrupted (Ctrl-C) |
| 141 | the reader of stdout went away (the output piped into `head`, which stopped reading) |

## Machine-readable output: `--json`

Every command that prints data takes `--json`: it prints one JSON document on stdout and
nothing else (progress and logs go to stderr). Its top-level `"schema"` key names the schema
and its version, `"<name>/<version>"`; the keys each schema lists below are always there
(null where they do not apply). A version goes up when a key is removed or renamed or its
meaning changes; new keys may come without a new version, so ignore keys you do not know
([Versioning](../versioning.md)). Numbers that are not finite are null, so the output is strict
JSON for `jq` and every parser.

```bash
tpufeed inspect data/train --json | jq .num_records
```

In the key tables, `a.b` is key `b` of object `a`, `a[].b` key `b` of each object in list `a`,
and `a{}.b` key `b` of each value of an object whose keys are the data's (record fields).
"""


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None and not action.option_strings:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


def _argument(action: argparse.Action) -> str:
    """How the argument is written: `PATHS...`, `--format FORMAT`, `--verify`."""
    if not action.option_strings:
        return _metavar(action) + ("..." if action.nargs in ("+", "*") else "")
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    return f"{flags} {_metavar(action)}" + ("..." if action.nargs in ("+", "*") else "")


def _synopsis(prog: str, actions: list[argparse.Action], extra: str) -> str:
    """The command's usage, wrapped to fit the page's column (72 characters)."""
    parts = []
    for action in actions:
        written = _argument(action).split(", ")[-1] if action.option_strings else _argument(action)
        repeat = "..." if _repeats(action) else ""
        optional = action.option_strings and not action.required
        parts.append(f"[{written}]{repeat}" if optional else written + repeat)
    if extra:
        parts.append(extra)
    lines, indent = [prog], " " * (len(prog) + 1)
    for part in parts:
        if len(lines[-1]) + 1 + len(part) > 72:
            lines.append(indent + part)
        else:
            lines[-1] += " " + part
    return "\n".join(lines)


def _value(action: argparse.Action) -> str:
    if action.choices is not None:
        return ", ".join(f"`{c}`" for c in action.choices)
    name = getattr(action.type, "__name__", "")
    return name if " " in name else ""  # the shared types name what they take (arguments.py)


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is False or default == [] or default == argparse.SUPPRESS:
        return ""
    return f"`{default}`"


def _cell(text: str) -> str:
    """`text` on one line of a table: `|` escaped, `<key>` shown rather than taken for HTML."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _sentence(text: str) -> str:
    text = _cell(text)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _repeats(action: argparse.Action) -> bool:
    """An option given again adds to the list (`--transform a --transform b`)."""
    return isinstance(action, argparse._AppendAction) and action.nargs not in ("+", "*")


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    extra = "[BEAM_OPTION ...]" if name == "build" else ""
    lines = [f"## tpufeed {name}", "", _sentence(parser.description or summary), ""]
    lines += ["```text", _synopsis(parser.prog, actions, extra), "```", ""]
    lines += ["| Argument | Takes | Default | What it does |", "| --- | --- | --- | --- |"]
    for action in actions:
        required = " (required)" if action.required and action.option_strings else ""
        help_text = action.help or ""
        if _repeats(action) and "repeat" not in help_text:
            help_text += "; repeat it to give several"
        lines.append(
            f"| `{_argument(action)}`{required} | {_value(action)} | {_default(action)} | "
            f"{_cell(help_text)} |"
        )
    for schema in parser.get_default("json_schemas") or ():
        lines += [
            "",
            f"### `--json`: `{schema.id}`",
            "",
            "| Key | What it holds |",
            "| --- | --- |",
        ]
        lines += [f"| `{path}` | {_cell(meaning)} |" for path, meaning in schema.fields.items()]
    return [*lines, ""]


def page() -> str:
    """The text of docs/reference/cli.md, from the parser as it is now."""
    sys.path.insert(0, str(ROOT))
    from tpufeed.cli.program import build_parser

    sub = _subcommands(build_parser())
    summaries = {a.dest: a.help or "" for a in sub._choices_actions}
    lines = [INTRO]
    for name, parser in sub.choices.items():
        lines += _command(name, summaries[name], parser)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(
                f"{PAGE} is out of date: run python docs/generate_cli_reference.py", file=sys.stderr
            )
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
