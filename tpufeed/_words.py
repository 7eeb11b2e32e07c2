"""Counts with their nouns in the right number, for messages and command output."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 file`, `2 files`, `1,024 records`; `nouns` for an irregular plural.

    >>> plural(1, "shard"), plural(3, "entry", "entries")
    ('1 shard', '3 entries')
    """
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
