"""Shard names as WebDataset users write them: `{a..b}` brace ranges and `file:` URLs.

`shard_paths` turns what `from_webdataset` is given into paths and globs for the opener: a
string is split at `::` into several (as `webdataset.shardlists.expand_urls` splits it), each
brace-expanded as the `braceexpand` package that WebDataset calls expands it (`{000..099}`
zero-padded ranges, `{a..e..2}` letters with a step, `{x,y}` lists, nested, `\\{` escaped),
and a `file:` URL becomes its path (`file:///data/a.tar` and `file:/data/a.tar` are
`/data/a.tar`, `file://localhost/data/a.tar` too). A list's strings are expanded the same
way, one by one; `os.PathLike` items are taken as they are.

>>> shard_paths("train-{000..002}.tar::file:///val/v-{a,b}.tar")
['train-000.tar', 'train-001.tar', 'train-002.tar', '/val/v-a.tar', '/val/v-b.tar']
"""

from __future__ import annotations

import itertools
import os
import re
import string
from collections.abc import Sequence

from tpufeed.errors import InvalidArgumentError

__all__ = ["braces", "shard_paths"]

_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
_ALPHABET = string.ascii_uppercase + string.ascii_lowercase
_ESCAPED = re.compile(r"\\(.)")
MAX_NAMES = 10_000_000  # a pattern that names more shards than this is refused, not expanded


def shard_paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str | os.PathLike]:
    """What `paths` name, brace ranges expanded and `file:` URLs made paths, in order."""
    if isinstance(paths, str):
        items: list[str | os.PathLike] = list(paths.split("::"))
    elif isinstance(paths, os.PathLike):
        return [paths]
    elif isinstance(paths, Sequence):
        items = list(paths)
    else:
        return paths  # resolve_paths names what it is not
    out: list[str | os.PathLike] = []
    for item in items:
        if isinstance(item, str):
            out += [_file_url(name) for name in braces(item)]
        else:
            out.append(item)
    return out


def _file_url(name: str) -> str:
    if not name.startswith("file:"):
        return name
    rest = name[len("file:") :]
    if not rest.startswith("//"):
        return rest
    host, slash, path = rest[2:].partition("/")
    if host not in ("", "localhost"):
        raise InvalidArgumentError(
            f"{name}: a file: URL of host {host!r}; tpufeed reads this machine's files "
            "(file:///path), or gs://, s3:// objects"
        )
    return slash + path


def braces(pattern: str) -> list[str]:
    """`pattern` brace-expanded as `braceexpand.braceexpand(pattern)` expands it."""
    parts = _pattern(pattern)
    total = 1
    for choices in parts:
        total *= len(choices)
    if total > MAX_NAMES:
        raise InvalidArgumentError(
            f"{pattern!r} names {total:,} shards, more than the {MAX_NAMES:,} tpufeed expands"
        )
    return [_ESCAPED.sub(r"\1", "".join(names)) for names in itertools.product(*parts)]


def _pattern(pattern: str) -> list[list[str]]:
    """The parts whose product `pattern` names: literals, and the choices of each brace."""
    start, depth, items, at = 0, 0, [], 0
    while at < len(pattern):
        char = pattern[at]
        if char == "\\":
            at += 2
            continue
        if char == "{":
            if depth == 0 and at > start:
                items.append([pattern[start:at]])
                start = at
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1 : at]
                choices = _expression(inner)
                if choices is None:  # not a range or a list: the braces are literal
                    items += [["{"], _joined(_pattern(inner)), ["}"]]
                else:
                    items.append(choices)
                start = at + 1
        at += 1
    if depth != 0:
        raise InvalidArgumentError(f"unbalanced braces in {pattern!r}")
    if start < len(pattern):
        items.append([pattern[start:]])
    return items


def _joined(parts: list[list[str]]) -> list[str]:
    """The names of a pattern nested in braces: its escapes are taken out here, and again with
    those of every pattern around it (as braceexpand flattens each level)."""
    return [_ESCAPED.sub(r"\1", "".join(names)) for names in itertools.product(*parts)]


def _expression(inner: str) -> list[str] | None:
    if match := _INT_RANGE.match(inner):
        return _int_range(*match.groups())
    if match := _CHAR_RANGE.match(inner):
        return _char_range(*match.groups())
    return _sequence(inner)


def _sequence(inner: str) -> list[str] | None:
    """The choices of `{x,y,...}`; None where `inner` has no comma at its own level."""
    start, depth, items, at = 0, 0, [], 0
    while at < len(inner):
        char = inner[at]
        if char == "\\":
            at += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(inner[start:at])
            start = at + 1
        at += 1
    if depth != 0 or not items:
        return None
    items.append(inner[start:])
    return [name for item in items for name in _joined(_pattern(item))]


def _int_range(first: str, last: str, step: str | None) -> list[str]:
    padded = any(s.startswith(("0", "-0")) for s in (first, last) if s not in ("0", "-0"))
    width = max(len(first), len(last)) if padded else 0
    by = (int(step) or 1) if step else 1
    a, b = int(first), int(last)
    if (abs(b - a) // by + 1) > MAX_NAMES:
        raise InvalidArgumentError(
            f"{{{first}..{last}}} names more than the {MAX_NAMES:,} shards tpufeed expands"
        )
    numbers = range(a, b + 1, by) if a < b else range(a, b - 1, -by)
    return [f"{n:0{width}d}" for n in numbers]


def _char_range(first: str, last: str, step: str | None) -> list[str]:
    by = (int(step) or 1) if step else 1
    a, b = _ALPHABET.index(first), _ALPHABET.index(last)
    if a < b:
        return list(_ALPHABET[a : b + 1 : by])
    return list(_ALPHABET[a : (b or -len(_ALPHABET)) - 1 : -by])
