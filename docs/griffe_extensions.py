"""Griffe extensions for the API reference (mkdocs.yml loads both).

- `TransformsSubpackage`: `tpufeed.transforms` is installed from `transforms/` (pyproject's
  package-dir), a mapping Griffe's static finder does not follow. Load that folder and attach
  it to `tpufeed` under its installed name, so `::: tpufeed.transforms` resolves.
- `DoctestBlocks`: tpufeed's docstrings carry bare `>>>` examples (no "Examples:" section).
  Markdown reads `>>>` as three nested block quotes, so each run of example lines becomes a
  fenced `pycon` block, without the `# doctest: +SKIP` flags.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_FLAG = re.compile(r"\s*#\s*doctest:.*$")


class TransformsSubpackage(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "tpufeed" or "transforms" in pkg.members:
            return
        pkg.set_member("transforms", loader.load("transforms"))


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
            block.append(_FLAG.sub("", lines[i][len(indent):] if lines[i].startswith(indent)
                                   else lines[i].lstrip()))
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [indent + "```pycon", *(indent + line for line in block), indent + "```"]
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
