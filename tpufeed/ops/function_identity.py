"""What a function computes, as a digest: its code, what it captures, and what its code reads.

`cache()` keys its entries by this, so that any change to what the cached stages compute makes
new entries instead of replaying old ones. Followed, for the user's own code (`code_origin`):

- the function's code (nested code included), defaults, captured values and attributes;
- the module-level values its code reads (`SCALE`, `TABLE`, `helpers.SCALE`: the global names
  and the attribute chains through the user's modules, from `code_reads`), at any depth;
- the user's functions and classes that it reaches, in any module of theirs, recursively
  (cycles end at the first repeat), and the modules it imports in its body.

A library's function, class or module is known by its name and its distribution's version (the
standard library by Python's), not followed; what a library's function captures, and a library's
object, are followed as values (`stable_form`: a tokenizer by its vocabulary, a transform by its
settings). Line numbers and file names are left out: moving a function changes nothing.

A value with no stable form (an open file, a lock, a generator, a bare `object()`) is refused,
naming the stage, the function and the value, with how to pass it instead, or to name the
code's version with `cache(..., key=...)`: never a key that differs every run, nor one that
stays while a value changes.

>>> function_identity(lambda x: x + 1) == function_identity(lambda x: x + 1)
True
>>> function_identity(lambda x: x + 1) == function_identity(lambda x: x + 2)
False
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.code_origin import library_version
from tpufeed.ops.code_reads import global_reads, imports, used_names
from tpufeed.ops.stable_form import NoStableForm, StableForm

__all__ = ["function_identity"]

_MISSING = object()
_BOOKKEEPING = frozenset(
    {
        "__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__annotations__",
        "__dataclass_fields__", "__dataclass_params__", "__match_args__", "__slots__",
        "__parameters__", "__orig_bases__", "__abstractmethods__", "_abc_impl", "__firstlineno__",
        "__static_attributes__", "__type_params__", "__protocol_attrs__", "__annotate__",
        "__non_callable_proto_members__", "__callable_proto_members_only__",
    }
)  # fmt: skip
_ADVICE = (
    "The key of cache() must tell apart every value the cached code depends on, from run to "
    "run. Pass what it stands for instead, as an argument, a closure or a functools.partial (the "
    "path of a file rather than the open file, a list rather than a generator, plain settings "
    "rather than the object), or name the code's version yourself: "
    'cache(directory, max_bytes, key="v1"), changed by hand whenever the code changes (the code '
    "is then not followed)."
)


def function_identity(fn: Any, stage: str = "the stage") -> bytes:
    """The digest that tells what `fn` computes apart (see the module docstring); raises
    `InvalidArgumentError` naming `stage` where a value it depends on has no stable form."""
    walker = _CodeForm()
    try:
        walker.add(fn)
    except NoStableForm as problem:
        raise InvalidArgumentError(
            f"cache() cannot key {stage}: {problem.where()}, which has no stable form to key "
            f"the cache by ({problem.why}). {_ADVICE}"
        ) from None
    except RecursionError:
        raise InvalidArgumentError(
            f"cache() cannot key {stage}: the values its code reads nest too deep to follow. "
            + _ADVICE
        ) from None
    return walker.digest.digest()


def _users(module_name: str) -> bool:
    return library_version(module_name) is None


class _CodeForm(StableForm):
    """`StableForm`, with the user's code followed: functions, classes and modules."""

    def add_code(self, code: types.CodeType) -> None:
        self.put("code", code.co_code)
        shape = (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
        counts = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)
        self.put("shape", repr((shape, counts, code.co_flags)))
        for const in code.co_consts:
            self.add(const)

    def add_function(self, fn: types.FunctionType) -> None:
        module = fn.__globals__.get("__name__")  # where it was defined (not a wrapper's name)
        label = f"{module}.{fn.__qualname__}"
        self.put("function", f"{fn.__module__}.{fn.__qualname__}")
        version = library_version(module) if isinstance(module, str) else None
        if version is not None:
            self.put("library", version)  # its code is its version's; what it holds is not
        else:
            self.add(fn.__code__)
        self._add_captured(fn, label)
        if version is not None:
            return
        self.scopes.append(used_names(fn.__code__))
        try:
            chains = global_reads(fn.__code__)
            if ("globals",) in chains:  # globals()["NAME"]: every global it may name
                named = sorted(self.scopes[-1] & fn.__globals__.keys())
                chains += [(name,) for name in named if (name,) not in chains]
            for chain in chains:
                self._add_global(fn, chain, label)
            for name, level in imports(fn.__code__):
                self._add_import(fn, name, level, label)
        finally:
            self.scopes.pop()

    def _add_captured(self, fn: types.FunctionType, label: str) -> None:
        code = fn.__code__
        defaults = fn.__defaults__ or ()
        names = code.co_varnames[code.co_argcount - len(defaults) : code.co_argcount]
        captured = [(f"the default of {n}", v) for n, v in zip(names, defaults)]
        captured += [(f"the default of {n}", v) for n, v in (fn.__kwdefaults__ or {}).items()]
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                captured.append((f"the captured value {name}", cell.cell_contents))
            except ValueError:  # an empty cell: a name not bound yet
                self.put("empty", name)
        captured += [(f"the attribute {n}", v) for n, v in vars(fn).items()]
        for what, value in captured:
            self.put("captured", what)
            with self.reading(label, what):
                self.add(value)

    def _add_global(self, fn: types.FunctionType, chain: tuple[str, ...], label: str) -> None:
        """A global `fn` reads, and the attributes read from it through the user's modules."""
        if chain[0] not in fn.__globals__:
            self.put("builtin", chain[0])  # or unbound: either way, the name says it all
            return
        value, reached = fn.__globals__[chain[0]], [chain[0]]
        for attribute in chain[1:]:
            if not (isinstance(value, types.ModuleType) and _users(value.__name__)):
                break  # a library's module (its version) or a value: taken whole
            value = vars(value).get(attribute, _MISSING)
            reached.append(attribute)
            if value is _MISSING:
                self.put("missing", ".".join(reached))
                return
        self.put("global", ".".join(reached))
        with self.reading(label, f"the global {'.'.join(reached)}"):
            self.add(value)

    def _add_import(self, fn: types.FunctionType, name: str, level: int, label: str) -> None:
        """A module `fn` imports in its body: looked up, and imported if it is the user's."""
        try:
            package = fn.__globals__.get("__package__")
            absolute = importlib.util.resolve_name("." * level + name, package) if level else name
        except (ImportError, ValueError):
            self.put("import", f"{level}:{name}")
            return
        for each in dict.fromkeys([absolute.partition(".")[0], absolute]):
            module = sys.modules.get(each)
            if module is None and _users(each):
                try:
                    module = importlib.import_module(each)
                except Exception:  # noqa: BLE001 - the function fails the same way when run
                    module = None
            if module is None:
                self.put("import", f"{each} {library_version(each) or 'not importable'}")
                continue
            with self.reading(label, f"the module {each}"):
                self.add(module)

    def add_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        self.put("module", name)
        version = library_version(name)
        if version is not None:
            self.put("library", version)
            return
        for attribute in sorted(self.scopes[-1]):  # what the code at hand may read of it
            value = vars(module).get(attribute, _MISSING)
            if value is not _MISSING:
                self.put("attribute", attribute)
                with self.step(f".{attribute}"):
                    self.add(value)

    def add_class(self, cls: type) -> None:
        module = getattr(cls, "__module__", None)
        self.put("class", f"{module}.{cls.__qualname__}")
        version = library_version(module) if isinstance(module, str) else "python"
        if version is not None:
            self.put("library", version)
            return
        label = f"{module}.{cls.__qualname__}"
        for base in cls.__bases__:
            self.add(base)
        if type(cls) is not type:
            self.add(type(cls))
        for name, member in list(vars(cls).items()):
            if name not in _BOOKKEEPING:
                self.put("member", name)
                with self.reading(label, f"the class attribute {cls.__qualname__}.{name}"):
                    self.add(member)


_CodeForm.handlers = (
    (types.CodeType, _CodeForm.add_code),
    (types.FunctionType, _CodeForm.add_function),
    (types.ModuleType, _CodeForm.add_module),
    (type, _CodeForm.add_class),
    *StableForm.handlers,
)
