"""Griffe extensions for the API reference (mkdocs.yml loads both).

- `TransformsSubpackage`: `tpufeed.transforms` is installed from `transforms/` (pyproject's
  package-dir), a mapping Griffe's static finder does not follow. Load that folder and attach
  it to `tpufeed` under its installed name, so `::: tpufeed.transforms` resolves.
- `DoctestBlocks`: tpufeed's docstrings carry bare `>>>` examples (no "Examples:" section).
  Markdown reads `>>>` as three nested block quotes, so each run of example lines becomes a
  fenced `pycon` block, without the `# doctest: +SKIP` flags. A line that starts with one of
  the function's parameter names and a colon (`sharding: a NamedSharding ...`) becomes a list
  item: Markdown would run those lines into one paragraph, and the Google-style parser would
  read `name: text` above an indented line as an admonition titled `name`.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_FLAG = re.compile(r"\s*#\s*doctest:.*$")


class TransformsSubpackage(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "tpufeed":
            return
        if "transforms" not in pkg.members:
            pkg.set_member("transforms", loader.load("transforms"))
        # Users build a Dataset with its constructors, never with the dataclass' own __init__
        # (whose fields are private): Griffe's dataclasses extension, which runs after this
        # one, would show that signature, so it is not told that Dataset is a dataclass.
        dataset = pkg["dataset"].members["Dataset"]
        dataset.decorators = [d for d in dataset.decorators if "dataclass" not in str(d.value)]
        dataset.labels.discard("dataclass")


def fence_doctests(text: str) -> str:
    """Wraps each run of `>>>` lines (with their `...` continuations and output) in ```pycon."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if not stripped.startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(stripped)]
        block = []
        while i < len(lines) and lines[i].strip():  # the example ends at a blank line
            block.append(
                _FLAG.sub(
                    "",
                    lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip(),
                )
            )
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [indent + "```pycon", *(indent + line for line in block), indent + "```"]
    return "\n".join(out)


def parameter_items(text: str, names: set[str]) -> str:
    """`name: text` lines at the start of a line, for parameter names, as Markdown list items."""
    pattern = re.compile(rf"^({'|'.join(map(re.escape, sorted(names)))}): ", re.M)
    return pattern.sub(lambda m: f"- `{m[1]}`: ", text) if names else text


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if isinstance(obj, griffe.Function):
            text = parameter_items(text, {p.name for p in obj.parameters} - {"self", "cls"})
        if ">>>" in text:
            text = fence_doctests(text)
        obj.docstring.value = text
