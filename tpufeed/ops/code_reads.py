"""What a function's code reads from outside itself, found in its bytecode: the global names it
loads with the attribute chains after them (`helpers.SCALE`, `np.float32`), the modules it
imports inside its body, and every name it uses, in its own code and in the code nested in it
(comprehensions, lambdas, inner functions).

>>> def fn(x):
...     return [helpers.SCALE * v for v in x]
>>> global_reads(fn.__code__)
[('helpers', 'SCALE')]
"""

from __future__ import annotations

import dis
import types
from collections.abc import Iterator

__all__ = ["code_objects", "global_reads", "imports", "used_names"]

_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})


def code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and every code object nested in its constants, at any depth."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def global_reads(code: types.CodeType) -> list[tuple[str, ...]]:
    """Each global name the code loads, with the attributes loaded from it at once after
    (`helpers.sub.LIMIT` is `('helpers', 'sub', 'LIMIT')`), in order of first appearance. A
    name the code itself assigns (`global _model`, set on first use) is its own state, not a
    value it reads: it is left out."""
    chains: dict[tuple[str, ...], None] = {}
    stored: set[str] = set()
    for each in code_objects(code):
        chain: list[str] = []
        for instruction in dis.get_instructions(each):
            if instruction.opname in _ATTRIBUTE_LOADS and chain:
                chain.append(instruction.argval)
                continue
            if chain:
                chains[tuple(chain)] = None
            chain = [instruction.argval] if instruction.opname in _GLOBAL_LOADS else []
            if instruction.opname in _GLOBAL_STORES:
                stored.add(instruction.argval)
        if chain:
            chains[tuple(chain)] = None
    return [chain for chain in chains if chain[0] not in stored]


def imports(code: types.CodeType) -> list[tuple[str, int]]:
    """The modules the code imports in its body: (name as written, level: the leading dots)."""
    found: dict[tuple[str, int], None] = {}
    for each in code_objects(code):
        consts: list[object] = []
        for instruction in dis.get_instructions(each):
            if instruction.opname == "IMPORT_NAME":
                level = consts[-2] if len(consts) >= 2 else 0
                found[(instruction.argval, level if isinstance(level, int) else 0)] = None
            consts = (
                consts[-1:] + [instruction.argval] if instruction.opname == "LOAD_CONST" else []
            )
    return list(found)


def used_names(code: types.CodeType) -> frozenset[str]:
    """Every name the code uses as a global or an attribute, and every string constant that
    could be one (`getattr(helpers, "SCALE")`, `globals()["SCALE"]`), nested code included:
    what it may read of a module it holds other than through a global chain."""
    names: set[str] = set()
    for each in code_objects(code):
        names.update(each.co_names)
        names.update(c for c in each.co_consts if isinstance(c, str) and c.isidentifier())
    return frozenset(names)
