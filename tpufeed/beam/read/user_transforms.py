"""The `--transform` functions of a build: loading them by name and applying them to a record.

A transform is named `package.module:function` or `path/to/file.py:function` (any callable
attribute works, e.g. an instance of a `tpufeed.transforms` class; the class itself is refused,
as it would make one object per record). It is called as
`fn(record)`, or `fn(record, rng)` when it takes two positional parameters; `rng` is a numpy
Generator fixed by the record's position in the input, so builds stay deterministic. It
returns a record (dict or bytes), None to drop the record, or a list of records.
"""

from __future__ import annotations

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


def resolve_spec(spec: str) -> str:
    """`spec` with a file path made absolute, so that workers find it whatever their cwd."""
    module, sep, name = spec.rpartition(":")
    if not sep or not module or not name:
        raise InvalidArgumentError(
            f"--transform {spec!r}: expected module:function or path/to/file.py:function"
        )
    return f"{os.path.abspath(module)}:{name}" if module.endswith(".py") else spec


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
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgumentError(
            f"{option} {spec!r}: expected module:function or path/to/file.py:function"
        )
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
    mistake = uncalled_class(fn)
    if mistake is not None:
        raise InvalidArgumentError(
            f"{option} {spec!r}: {mistake} {option} names a function or an "
            f"instance: put `{attr.lower()} = {attr}()` in a file and pass "
            f"file.py:{attr.lower()}"
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
