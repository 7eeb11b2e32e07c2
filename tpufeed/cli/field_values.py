"""How `tpufeed inspect` shows record 0's fields: an array's dtype and shape, and the values of
a small one; another value's type and value. Values are written as numpy writes them at their
own dtype (float32 with float32's digits), scalars alike whether numpy's or Python's (`0`, not
`np.int64(0)`), on one line, and cut after a whole value, never inside a number.

>>> record_fields({"x": np.float32([0.1, 2])})
{'x': {'dtype': 'float32', 'shape': [2], 'repr': '[0.1, 2. ]'}}
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SHOWN_CHARACTERS", "SHOWN_ELEMENTS", "record_fields", "shown"]

SHOWN_ELEMENTS = 16  # arrays up to this size show their values
SHOWN_CHARACTERS = 60  # a value's text is cut to this length, after a whole value


def record_fields(record: dict) -> dict[str, dict[str, Any]]:
    """Each field of `record`: an array's (or a numpy scalar's) dtype and shape and, for a
    scalar or a small array, its values; another value's type and value."""
    fields: dict[str, dict[str, Any]] = {}
    for key, value in record.items():
        if isinstance(value, (np.ndarray, np.generic)):
            array = np.asarray(value)
            fields[key] = {"dtype": str(array.dtype), "shape": list(array.shape)}
            if array.size <= SHOWN_ELEMENTS:  # a scalar's dtype alone says little
                fields[key]["repr"] = shown(_array_text(array))
        else:
            fields[key] = {"type": type(value).__name__, "repr": shown(_value_text(value))}
    return fields


def _array_text(array: np.ndarray) -> str:
    """The values as numpy prints them at their dtype, commas between, on one line."""
    if array.dtype.kind in "SUO" or array.ndim == 0:
        return repr(array.tolist()) if array.dtype.kind in "SUO" else str(array)
    return np.array2string(array, separator=", ", threshold=SHOWN_ELEMENTS, max_line_width=10**6)


def _value_text(value: Any) -> str:
    """A Python value's repr, with the numpy values inside it (a list of arrays, a dict of
    scalars) written as numpy writes them."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_value_text(v) for v in value[:SHOWN_CHARACTERS])
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.size > SHOWN_ELEMENTS:
            return f"<{array.dtype}{list(array.shape)}>"
        return _array_text(array)
    return repr(value)


def shown(text: str) -> str:
    """`text` on one line and at most `SHOWN_CHARACTERS` long, cut after a whole value (at a
    ", ") where there is one, "..." marking the cut."""
    text = " ".join(text.split())
    if len(text) <= SHOWN_CHARACTERS:
        return text
    room = SHOWN_CHARACTERS - 3
    cut = text.rfind(", ", 0, room)
    return (text[: cut + 1] if cut > room // 2 else text[:room]) + "..."
