"""The stable form of a value: what it is made of, fed into a digest that is the same in every
process and every run for equal values, and differs when any part differs.

Numbers, strings and bytes by their text; containers by their items (a set's in an order of its
own, since a set's iteration order changes between runs); numpy arrays and scalars by dtype,
shape and bytes; methods, partials and descriptors by what they call and on what; a library's
builtin by its name and version; any other object by what `pickle` would make it from
(`__reduce_ex__`: its class, arguments and state), followed in turn, so a tokenizer is known by
its vocabulary and a transform by its settings.

A value with no stable form is refused (`NoStableForm`): what pickle refuses (an open file, a
lock, a generator) and a bare `object()`, known only by its address. A key made of it would
differ every run, or stay while the value changed; neither is allowed.

`function_identity` extends the walk to code: functions, classes and modules.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import hashlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tpufeed.ops.code_origin import library_version

__all__ = ["NoStableForm", "StableForm"]

PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes, type(...)})
_CALLABLES = (
    types.MethodType,
    functools.partial,
    classmethod,
    staticmethod,
    property,
    functools.cached_property,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)
Handlers = tuple[tuple[Any, Callable[[Any, Any], None]], ...]


class NoStableForm(Exception):
    """A value a key cannot be made of, with where it was met (filled in on the way out)."""

    def __init__(self, value: Any, why: str):
        super().__init__(why)
        kind = type(value)
        module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
        self.kind, self.why = f"{module}{kind.__qualname__}", why
        self.function: str | None = None
        self.read: str | None = None
        self.path: list[str] = []

    def inside(self, step: str) -> None:
        """One step into the value that holds it (`['key']`, `.attribute`), outermost last."""
        if self.read is None:
            self.path.insert(0, step)

    def reached(self, function: str, read: str) -> None:
        """The innermost function that uses it, and how (`the global TABLE`)."""
        if self.read is None:
            self.function, self.read = function, read + "".join(self.path)

    def where(self) -> str:
        if self.read is None:
            return f"its function{''.join(self.path)} is a {self.kind}"
        return f"{self.function} uses {self.read}, a {self.kind}"


class StableForm:
    """Feeds the stable form of each value it is given into one digest (`add`)."""

    handlers: Handlers = ()  # set below; subclasses put their own first

    def __init__(self) -> None:
        self.digest = hashlib.blake2b(digest_size=32)
        self.memo: dict[Any, int] = {}
        self.alive: list[Any] = []  # what the memo names by id stays alive (no id reused)
        self.scopes: list[frozenset[str]] = [frozenset()]  # names the code at hand uses

    def put(self, tag: str, data: bytes | str | memoryview = b"") -> None:
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        self.digest.update(b"%s:%d:" % (tag.encode(), len(raw)))
        self.digest.update(raw)

    def add(self, value: Any) -> None:
        kind = type(value)
        if kind in PLAIN:
            self.put(kind.__name__, repr(value))
            return
        # A user's module is keyed by the names the code at hand uses of it: once per scope.
        key = (id(value), self.scopes[-1]) if kind is types.ModuleType else id(value)
        seen = self.memo.get(key)
        if seen is not None:
            self.put("seen", str(seen))
            return
        self.memo[key] = len(self.memo)
        self.alive.append(value)
        for kinds, method in self.handlers:
            if isinstance(value, kinds):
                method(self, value)
                return
        self.add_instance(value)

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        try:
            yield
        except NoStableForm as problem:
            problem.inside(step)
            raise

    @contextlib.contextmanager
    def reading(self, function: str, read: str) -> Iterator[None]:
        try:
            yield
        except NoStableForm as problem:
            problem.reached(function, read)
            raise

    def add_array(self, array: np.ndarray) -> None:
        dtype = array.dtype
        self.put("ndarray", f"{dtype.str}{dtype.descr if dtype.fields else ''}{array.shape}")
        if dtype.hasobject:
            for index, item in enumerate(array.reshape(-1)):
                with self.step(f"[{index}]"):
                    self.add(item)
            return
        self.put("data", np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)

    def add_scalar(self, value: np.generic | np.dtype) -> None:
        if isinstance(value, np.dtype):
            self.put("dtype", repr(value))
        else:
            self.put("scalar", value.dtype.str)
            self.put("data", value.tobytes())

    def add_items(self, value: list[Any] | tuple[Any, ...]) -> None:
        self.add_container_class(value)
        if all(type(item) in PLAIN for item in value):
            self.put("plain", repr(value))
            return
        self.put("items", str(len(value)))
        for index, item in enumerate(value):
            with self.step(f"[{index}]"):
                self.add(item)

    def add_mapping(self, value: dict[Any, Any]) -> None:
        self.add_container_class(value)
        if all(type(k) in PLAIN and type(v) in PLAIN for k, v in value.items()):
            self.put("plain", repr(value))
            return
        self.put("items", str(len(value)))
        for key, item in value.items():
            self.add(key)
            with self.step(f"[{key!r}]"):
                self.add(item)

    def add_set(self, value: set[Any] | frozenset[Any]) -> None:
        """Items in the order of their own digests: a set's order changes between runs."""
        self.add_container_class(value)
        digests = []
        for item in value:
            walker = type(self)()
            walker.scopes = [self.scopes[-1]]
            with self.step("{...}"):
                walker.add(item)
            digests.append(walker.digest.digest())
        self.put("set", b"".join(sorted(digests)))

    def add_container_class(self, value: Any) -> None:
        kind = type(value)
        if kind in (list, tuple, dict, set, frozenset):
            self.put(kind.__name__)
        else:  # a namedtuple, an OrderedDict, a user's dict subclass: its class too
            self.add(kind)

    def add_callable(self, value: Any) -> None:
        """Methods, partials and descriptors: what they call, and on what."""
        if isinstance(value, types.MethodType):
            parts = [value.__func__, value.__self__]
        elif isinstance(value, functools.partial):
            parts = [value.func, value.args, value.keywords]
        elif isinstance(value, (classmethod, staticmethod)):
            parts = [value.__func__]
        elif isinstance(value, property):
            parts = [value.fget, value.fset, value.fdel]
        elif isinstance(value, functools.cached_property):
            parts = [value.func, value.attrname]
        else:
            return self.add_builtin(value)
        self.put(type(value).__name__)
        for part in parts:
            self.add(part)

    def add_builtin(self, value: Any) -> None:
        """A function or method written in C: its name and library, and what it is bound to."""
        owner = getattr(value, "__self__", None)
        if owner is None:
            owner = getattr(value, "__objclass__", None)
        module = getattr(value, "__module__", None)
        if not isinstance(module, str):
            module = (
                owner.__name__ if isinstance(owner, types.ModuleType) else type(owner).__module__
            )
        self.put("builtin", f"{module}.{value.__qualname__}")
        self.put("library", library_version(module) or "user")
        if owner is not None and not isinstance(owner, types.ModuleType):
            with self.step(".__self__"):
                self.add(owner)

    def add_instance(self, value: Any) -> None:
        """Any other object: by what pickle would make it from (`__reduce_ex__`), followed."""
        kind = type(value)
        if kind is object:
            raise NoStableForm(value, "a bare object() is known only by its address")
        reducer = copyreg.dispatch_table.get(kind)
        reduced: Any
        try:
            reduced = reducer(value) if reducer is not None else value.__reduce_ex__(4)
        except Exception as error:  # noqa: BLE001 - what pickle refuses, refused by name
            raise NoStableForm(value, f"{type(error).__name__}: {error}") from None
        if isinstance(reduced, str):  # a global found by its name: a library's, or a wrapper
            module = getattr(value, "__module__", None) or kind.__module__
            self.put("named", f"{module}.{reduced}")
            self.put("library", library_version(str(module)) or "user")
            wrapped = getattr(value, "__wrapped__", None)
            if wrapped is not None:
                with self.step(".__wrapped__"):
                    self.add(wrapped)
            return
        self.put("object", str(len(reduced)))
        self.add(reduced[0])
        with self.step("(...)"):
            self.add(reduced[1])
        state = reduced[2] if len(reduced) > 2 else None
        for key, item in state.items() if isinstance(state, dict) else [("", state)]:
            self.put("state", str(key))
            with self.step(f".{key}" if key else ""):
                self.add(item)
        for items in reduced[3:5]:
            self.add(list(items) if items is not None else None)


StableForm.handlers = (
    (np.ndarray, StableForm.add_array),
    ((np.generic, np.dtype), StableForm.add_scalar),
    ((list, tuple), StableForm.add_items),
    (dict, StableForm.add_mapping),
    ((set, frozenset), StableForm.add_set),
    (_CALLABLES, StableForm.add_callable),
)
