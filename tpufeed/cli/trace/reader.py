"""A Chrome trace-event JSON file read as a stream: its events one at a time, its other keys
(`otherData`, ...) as values, so that a file of any length is read in bounded memory.

The file is opened through the opener (a regular file only: a FIFO is refused, never waited
on) and decoded a chunk at a time; each JSON value, an event or a top-level key's, is decoded
from a buffer that holds it and at most one chunk more, and one value larger than `MAX_VALUE`
characters is refused. Anything that is not an object with a `traceEvents` list of objects
(truncated JSON, another document, bytes that are not UTF-8) is a `CorruptDataError` naming
the file, the byte offset and the cause.

>>> reader = TraceReader("host0.json")                  # doctest: +SKIP
>>> for event in reader.events(): ...                    # doctest: +SKIP
>>> reader.other["otherData"]                            # doctest: +SKIP
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from tpufeed.errors import CorruptDataError
from tpufeed.storage.bounded import malformed
from tpufeed.storage.opener import FileIdentity, open_pinned, open_regular

__all__ = ["CHUNK", "MAX_VALUE", "TraceReader"]

CHUNK = 1 << 20  # characters decoded at a time
MAX_VALUE = 16 << 20  # the longest one event (or other value) may be, in characters
_SPACE = re.compile(r"[ \t\n\r]*")
_SEPARATOR = re.compile(r"[ \t\n\r]*([,\]])")  # what follows an event: the next, or the end


class _NotJson(ValueError):
    """NaN or an infinity: Python reads them, JSON (and the trace viewers) do not."""


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"holds {name}, which is no JSON number")


_decoder = json.JSONDecoder(parse_constant=_refuse_constant)


class TraceReader:
    """One pass over `path`: `events()` yields each event; once it has ended, `other` holds the
    document's other top-level keys. `identity` is the file read; `pinned`, that of an earlier
    pass, which it must still be (a file changed between two passes is refused by name)."""

    def __init__(self, path: str, pinned: FileIdentity | None = None):
        self.path = path
        self.other: dict[str, Any] = {}
        self._buffer, self._at, self._consumed = "", 0, 0  # consumed: characters dropped
        self._eof = False
        if pinned is None:
            fd, self.identity = open_pinned(path)
        else:
            fd, self.identity = open_regular(path, pinned=pinned), pinned
        self._file = os.fdopen(fd, "rb")
        self._text = codecs.getincrementaldecoder("utf-8")()

    def events(self) -> Iterator[dict[str, Any]]:
        """The events in the file's order; the whole document is checked to its end."""
        try:
            self._expect("{", "a JSON object (a Chrome trace-event file)")
            found, keys = False, 0
            while not self._next_is("}"):
                if keys:
                    self._expect(",", "',' or '}' after a key's value")
                key = self._value("a key")
                if not isinstance(key, str):
                    raise self._bad(f"a key must be a string, not {key!r}")
                self._expect(":", "':' after a key")
                keys += 1
                if key == "traceEvents":
                    if found:
                        raise self._bad("a second 'traceEvents' key")
                    found = True
                    yield from self._array()
                else:
                    self.other[key] = self._value(f"the value of {key!r}")
            self._expect("}", "'}'")
            if self._skip_space():
                raise self._bad("data after the document's end")
            if not found:
                raise self._bad("no 'traceEvents' key: not a Chrome trace-event file")
        finally:
            self._file.close()

    def _array(self) -> Iterator[dict[str, Any]]:
        self._expect("[", "'[' opening traceEvents, a list of events")
        if self._next_is("]"):
            self._at += 1
            return
        index = 0
        while True:
            event = self._value(f"event {index}")
            if not isinstance(event, dict):
                raise self._bad(f"event {index} is {type(event).__name__}, not an object")
            yield event
            index += 1
            found = _SEPARATOR.match(self._buffer, self._at)  # the common case, in one call
            if found is not None:
                self._at = found.end()
                if found.group(1) == "]":
                    return
                continue
            if self._next_is("]"):  # the buffer ended before the separator: read on
                self._at += 1
                return
            self._expect(",", "',' or ']' after an event")

    def _value(self, what: str) -> Any:
        """The JSON value at the cursor, more of the file read until it is whole."""
        self._skip_space()
        while True:
            try:
                value, end = _decoder.raw_decode(self._buffer, self._at)
            except json.JSONDecodeError as error:
                if self._eof:
                    cause = "the file ends inside it (truncated)"
                    if error.pos < len(self._buffer) and "Unterminated" not in error.msg:
                        cause = f"not JSON: {error.msg}"
                    raise self._bad(f"{what}: {cause}", error.pos) from None
                self._more(what)
                continue
            except RecursionError:
                raise self._bad(f"{what}: nested too deeply") from None
            except _NotJson as error:
                raise self._bad(f"{what} {error}") from None
            if end < len(self._buffer) or self._eof:  # a number may go on in the next chunk
                self._at = end
                return value
            self._more(what)

    def _more(self, what: str) -> None:
        """One more chunk into the buffer (what is behind the cursor dropped first)."""
        if len(self._buffer) - self._at > MAX_VALUE:
            raise self._bad(f"{what} is longer than {MAX_VALUE:,} characters")
        self._consumed += self._at
        self._buffer, self._at = self._buffer[self._at :], 0
        try:
            chunk = self._file.read(CHUNK)
            self._buffer += self._text.decode(chunk, final=not chunk)
        except UnicodeDecodeError as error:
            raise self._bad(f"not UTF-8 text ({error.reason})") from None
        except OSError as error:
            raise CorruptDataError(
                f"{self.path}: cannot read: {error.strerror or error}", path=self.path
            ) from None
        self._eof = not chunk

    def _skip_space(self) -> bool:
        """Moves past whitespace; whether anything follows it."""
        while True:
            self._at = _SPACE.match(self._buffer, self._at).end()  # type: ignore[union-attr]
            if self._at < len(self._buffer):
                return True
            if self._eof:
                return False
            self._more("whitespace")

    def _next_is(self, char: str) -> bool:
        return self._skip_space() and self._buffer[self._at] == char

    def _expect(self, char: str, what: str) -> None:
        if not self._skip_space():
            raise self._bad(f"expected {what}: the file ends (truncated)")
        if self._buffer[self._at] != char:
            found = self._buffer[self._at : self._at + 20]
            raise self._bad(f"expected {what}, found {found!r}")
        self._at += 1

    def _bad(self, cause: str, at: int | None = None) -> CorruptDataError:
        """The error for the file's text at `at` (default: the cursor), as a character offset
        (the byte offset where the text is ASCII, as tpufeed writes it)."""
        where = self._consumed + (self._at if at is None else at)
        return malformed(self.path, "trace file", cause, offset=where)
