"""What a function computes, as bytes: its code, constants, defaults and captured values.

`cache()` keys its entries by this, so that editing a `map` function (its code, a constant it
closes over, a transform's settings) makes new entries instead of reading the old ones. Line
numbers and file names are left out (moving a function does not change what it computes); a
value with no stable form (an object whose repr holds its address) changes every run, which
only costs a recomputation.

>>> function_identity(lambda x: x + 1) == function_identity(lambda x: x + 1)
True
>>> function_identity(lambda x: x + 1) == function_identity(lambda x: x + 2)
False
"""

from __future__ import annotations

import functools
import types
from typing import Any

import numpy as np

__all__ = ["function_identity"]

_DEPTH = 8  # nested values followed this deep


def function_identity(fn: Any) -> bytes:
    """The bytes that tell what `fn` computes apart (see the module docstring)."""
    parts: list[bytes] = []
    _add(fn, parts, _DEPTH, set())
    return b"\0".join(parts)


def _add(value: Any, parts: list[bytes], depth: int, seen: set[int]) -> None:
    if depth == 0 or id(value) in seen:
        parts.append(b"...")
        return
    if isinstance(value, (type(None), bool, int, float, complex, str, bytes)):
        parts.append(repr(value).encode())
        return
    seen = seen | {id(value)}
    if isinstance(value, np.ndarray):
        parts += [str(value.dtype).encode(), repr(value.shape).encode(), value.tobytes()]
    elif isinstance(value, types.CodeType):
        _add_code(value, parts, depth, seen)
    elif isinstance(value, types.FunctionType):
        _add_function(value, parts, depth, seen)
    elif isinstance(value, types.MethodType):
        _add(value.__func__, parts, depth - 1, seen)
        _add(value.__self__, parts, depth - 1, seen)
    elif isinstance(value, functools.partial):
        for part in (value.func, value.args, value.keywords):
            _add(part, parts, depth - 1, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        parts.append(type(value).__name__.encode())
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        for item in items:
            _add(item, parts, depth - 1, seen)
    elif isinstance(value, dict):
        for key, item in value.items():
            _add(key, parts, depth - 1, seen)
            _add(item, parts, depth - 1, seen)
    elif isinstance(value, (types.BuiltinFunctionType, types.ModuleType, type)):
        parts.append(f"{getattr(value, '__module__', '')}.{value.__qualname__}".encode())
    else:
        _add_object(value, parts, depth, seen)


def _add_code(code: types.CodeType, parts: list[bytes], depth: int, seen: set[int]) -> None:
    parts += [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    for const in code.co_consts:
        _add(const, parts, depth - 1, seen)


def _add_function(fn: types.FunctionType, parts: list[bytes], depth: int, seen: set[int]) -> None:
    parts.append(f"{fn.__module__}.{fn.__qualname__}".encode())
    _add_code(fn.__code__, parts, depth, seen)
    for value in (fn.__defaults__, fn.__kwdefaults__):
        _add(value, parts, depth - 1, seen)
    for cell in fn.__closure__ or ():
        try:
            _add(cell.cell_contents, parts, depth - 1, seen)
        except ValueError:  # an empty cell: a name not bound yet
            parts.append(b"<empty>")
    for name in fn.__code__.co_names:  # the module's own functions that it calls
        called = fn.__globals__.get(name)
        if isinstance(called, types.FunctionType) and called.__module__ == fn.__module__:
            _add(called, parts, depth - 1, seen)


def _add_object(value: Any, parts: list[bytes], depth: int, seen: set[int]) -> None:
    """An instance (a transform such as `Resize(256)`): its class's code and its attributes."""
    kind = type(value)
    parts.append(f"{kind.__module__}.{kind.__qualname__}".encode())
    for klass in kind.__mro__[:-1]:  # every method it may call on itself
        for method in vars(klass).values():
            if isinstance(method, types.FunctionType):
                _add(method, parts, depth - 1, seen)
    attributes = getattr(value, "__dict__", None)
    if attributes is None:
        slots = [s for k in kind.__mro__ for s in getattr(k, "__slots__", ())]
        attributes = {s: getattr(value, s, None) for s in slots}
    if attributes:
        _add(attributes, parts, depth - 1, seen)
    else:
        parts.append(repr(value).encode())
