"""The `--transform` functions of a build: loading them by name and applying them to a record.

A transform is named `package.module:function` or `path/to/file.py:function` (any callable
attribute works, e.g. an instance of a `tpufeed.transforms` class; the class itself is refused,
as it would make one object per record), or made once by a call with literal arguments,
`tpufeed.transforms:Cast({'label': 'int32'})` (no file of your own for it). It is called as
`fn(record)`, or `fn(record, rng)` when it takes two positional parameters; `rng` is a numpy
Generator fixed by the record's position in the input, so builds stay deterministic. It
returns a record (dict or bytes), None to drop the record, or a list of records.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

from tpufeed.errors import InvalidArgumentError, TransformError
from tpufeed.ops.user_functions import is_interruption, uncalled_class
from tpufeed.order.rng import RecordRngs

__all__ = ["TransformChain", "load_transform", "normalize_record", "resolve_spec"]


_EXPECTED = (
    "expected module:function or path/to/file.py:function, or a callable made with literal "
    "arguments such as tpufeed.transforms:Cast({'label': 'int32'})"
)


def _split(spec: str, option: str) -> tuple[str, str, str]:
    """(module or file, attribute, call arguments' text or "") of a spec: the arguments, which
    may hold colons of their own, begin at the first "(" after the attribute."""
    paren = spec.find("(")
    named, arguments = (spec, "") if paren < 0 else (spec[:paren], spec[paren:])
    module, sep, attr = named.rpartition(":")
    if not sep or not module or not attr.strip() or (arguments and not arguments.endswith(")")):
        raise InvalidArgumentError(f"{option} {spec!r}: {_EXPECTED}")
    return module, attr.strip(), arguments


def resolve_spec(spec: str) -> str:
    """`spec` with a file path made absolute, so that workers find it whatever their cwd."""
    module, attr, arguments = _split(spec, "--transform")
    return f"{os.path.abspath(module)}:{attr}{arguments}" if module.endswith(".py") else spec


def _literal_call(text: str, spec: str, option: str) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of `text` ("(...)"), each a Python literal
    (numbers, strings, lists, tuples, dicts, None, True, False): never code that runs."""
    try:
        call = ast.parse(f"f{text}", mode="eval").body
    except SyntaxError as e:
        at = f" at column {e.offset - 1}" if e.offset else ""  # the "f" we put before it
        raise InvalidArgumentError(
            f"{option} {spec!r}: cannot read its arguments {text!r}: {e.msg}{at}"
        ) from None
    if not isinstance(call, ast.Call) or any(kw.arg is None for kw in call.keywords):
        raise InvalidArgumentError(f"{option} {spec!r}: {_EXPECTED}")
    values = []
    for node in [*call.args, *(kw.value for kw in call.keywords)]:
        try:
            values.append(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError, RecursionError):
            raise InvalidArgumentError(
                f"{option} {spec!r}: argument {ast.unparse(node)!r} is not a literal (numbers, "
                "strings, lists, tuples, dicts, None, True, False); put code in a file.py "
                "transform"
            ) from None
    n = len(call.args)
    return values[:n], {kw.arg: v for kw, v in zip(call.keywords, values[n:]) if kw.arg}


def _on_path(folder: str) -> None:
    """Lets imports find modules in `folder`; appended, so it never hides an installed one."""
    if folder not in sys.path and not (folder == os.getcwd() and "" in sys.path):
        sys.path.append(folder)


def load_transform(spec: str, option: str = "--transform") -> Callable[..., Any]:
    """The callable named by `spec` (see the module docstring); errors name it as `option`.

    A module is looked for in the current directory too (as `python -m` does, which the
    `tpufeed` script does not), and a file's own folder is searched by its imports, so a
    transform file can import a module next to it.
    """
    module_name, attr, arguments = _split(spec, option)
    try:
        if module_name.endswith(".py"):
            module = _load_file(module_name, spec, option)
        else:
            _on_path(os.getcwd())
            module = importlib.import_module(module_name)
    except InvalidArgumentError:
        raise
    except Exception as e:
        where = (
            f" (looked in the current directory {os.getcwd()} too)"
            if isinstance(e, ModuleNotFoundError)
            else ""
        )
        raise InvalidArgumentError(
            f"{option} {spec!r}: cannot import {module_name}: {type(e).__name__}: {e}{where}"
        ) from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InvalidArgumentError(f"{option} {spec!r}: {module_name} has no callable {attr!r}")
    if arguments:
        fn = _made(fn, arguments, spec, option)
    mistake = uncalled_class(fn)
    if mistake is not None:
        raise InvalidArgumentError(
            f"{option} {spec!r}: {mistake} {option} names a function or an "
            f"instance: put `{attr.lower()} = {attr}()` in a file and pass "
            f"file.py:{attr.lower()}, or make it here with literal arguments: "
            f"{module_name}:{attr}(...)"
        )
    return fn


def _made(make: Callable[..., Any], arguments: str, spec: str, option: str) -> Any:
    """What `make(arguments)` returns: the transform, made once (a class's instance)."""
    args, kwargs = _literal_call(arguments, spec, option)
    try:
        fn = make(*args, **kwargs)
    except Exception as e:
        raise InvalidArgumentError(
            f"{option} {spec!r}: calling it raised {type(e).__name__}: {e}"
        ) from e
    if not callable(fn):
        raise InvalidArgumentError(
            f"{option} {spec!r}: it returned {type(fn).__name__}, not a callable transform"
        )
    return fn


def _load_file(module_name: str, spec: str, option: str) -> Any:
    """The module of the Python file `module_name`, loaded once under a name of its own; its
    folder is searched by its imports."""
    if not os.path.isfile(module_name):
        raise InvalidArgumentError(f"{option} {spec!r}: no such file: {module_name}")
    unique = "tpufeed_transform_" + hashlib.sha256(module_name.encode()).hexdigest()[:16]
    module = sys.modules.get(unique)
    if module is not None:
        return module
    _on_path(os.path.dirname(os.path.abspath(module_name)))
    loader_spec = importlib.util.spec_from_file_location(unique, module_name)
    if loader_spec is None or loader_spec.loader is None:
        raise InvalidArgumentError(
            f"{option} {spec!r}: cannot load {module_name} as a Python module"
        )
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[unique] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[unique]
        raise
    # Its functions travel by value: a worker process cannot import the file by this name.
    cloudpickle.register_pickle_by_value(module)
    return module


def _takes_rng(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 2


def _to_value(key: str, value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, str, bytes)):
        return value
    if isinstance(value, (list, tuple)):
        try:
            arr = np.asarray(value)
        except ValueError as e:
            raise ValueError(f"key {key!r}: a ragged nested list cannot be stored: {e}") from None
        if arr.dtype.kind not in "biuf":
            raise ValueError(
                f"key {key!r}: lists must hold numbers or bools to be stored as an "
                f"array, got {str(value)[:60]} (dtype {arr.dtype})"
            )
        return arr
    if value is None:
        raise ValueError(f"key {key!r} is null; drop it or give it a value in a --transform")
    raise ValueError(
        f"key {key!r}: a {type(value).__name__} cannot be stored (use numbers, "
        "str, bytes, bools, lists of numbers or numpy arrays)"
    )


def normalize_record(record: Any) -> Any:
    """JSON-style values made storable: lists of numbers become numpy arrays."""
    if not isinstance(record, dict):
        return record
    return {key: _to_value(key, value) for key, value in record.items()}


class TransformChain:
    """Applies the loaded transforms in order; each may return one record, None or a list."""

    def __init__(self, specs: Sequence[str]):
        self.specs = tuple(specs)
        self._fns = [load_transform(spec) for spec in self.specs]
        self._rngs = [
            RecordRngs(0, stream) if _takes_rng(fn) else None for stream, fn in enumerate(self._fns)
        ]

    def __call__(self, record: Any, file_index: int, index: int) -> list[Any]:
        """The records out; a transform that raises gives a TransformError with its traceback."""
        records = [record]
        if not self._fns:  # no --transform: every record as it is (a call a record)
            return records
        for spec, fn, rngs in zip(self.specs, self._fns, self._rngs):
            out: list[Any] = []
            rng = rngs.for_record(file_index, index) if rngs is not None else None
            for item in records:
                try:
                    result = fn(item, rng) if rng is not None else fn(item)
                except BaseException as e:  # SystemExit & co. are its failures too
                    if is_interruption(e):
                        raise
                    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                    raise TransformError(
                        f"--transform {spec} raised {type(e).__name__}: {e}", traceback_text=tb
                    ) from e
                if isinstance(result, (list, tuple)):
                    out.extend(result)
                elif result is not None:
                    out.append(result)
            records = out
        return records
