"""Sizes a reader can hold: no module of the package over 400 lines, no function over 50
(docs/architecture.md). Split a module or a function that grows past them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = [ROOT / "tpufeed", ROOT / "transforms"]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


def _modules() -> list[Path]:
    return sorted(p for folder in PACKAGE for p in folder.rglob("*.py") if not p.is_symlink())


def test_the_package_is_found():
    assert len(_modules()) > 100


def test_no_module_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := p.read_text().count("\n")) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_50_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
