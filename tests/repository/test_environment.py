"""docs/environment.md names every environment variable the library reads, and only those.

A variable is read by a module that touches `os.environ` (or `os.getenv`): every string in it
shaped like a variable's name (`TPUFEED_CACHE_DIR`) counts, except the names in `__all__`. A
key read through a name must be a string constant of the same module, so that it is counted.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "environment.md"
NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
READS = {"get", "pop", "setdefault", "getenv"}  # os.environ.get(KEY), os.getenv(KEY), ...


def modules() -> list[pathlib.Path]:
    package = [p for p in (ROOT / "tpufeed").rglob("*.py") if "transforms" not in p.parts]
    return sorted(package + list((ROOT / "transforms").rglob("*.py")))


def _exported(tree: ast.Module) -> set[int]:
    """The ids of the string nodes inside `__all__ = [...]`."""
    return {
        id(node)
        for statement in tree.body
        if isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets)
        for node in ast.walk(statement.value)
    }


def _keys_read(tree: ast.Module) -> list[ast.expr]:
    """The key of each `os.environ.get(KEY)`, `os.getenv(KEY)`, `os.environ[KEY]`, ..."""
    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            target = ast.unparse(node.func.value)
            if node.func.attr in READS and target in ("os.environ", "os", "environ"):
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            keys.append(node.slice)
    return keys


def read_by(path: pathlib.Path) -> set[str]:
    text = path.read_text()
    if "environ" not in text and "getenv" not in text:
        return set()
    tree = ast.parse(text)
    constants = {
        target.id: statement.value.value
        for statement in tree.body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    for key in _keys_read(tree):
        followed = isinstance(key, ast.Constant) or (
            isinstance(key, ast.Name) and isinstance(constants.get(key.id), str)
        )
        assert followed, f"{path}:{key.lineno}: read the variable by a literal or a constant"
    exported = _exported(tree)
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and NAME.match(node.value)
        and id(node) not in exported
    }


def documented() -> set[str]:
    """The variables in the first column of the page's table."""
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def test_the_page_names_every_variable_the_code_reads_and_no_other():
    read = {name: path for path in modules() for name in read_by(path)}
    assert {"TPUFEED_CACHE_DIR", "STORAGE_EMULATOR_HOST", "TPUFEED_FORKSERVER"} <= set(read)
    listed = documented()
    missing = {n: str(p.relative_to(ROOT)) for n, p in read.items() if n not in listed}
    assert not missing, f"add these to docs/environment.md: {missing}"
    assert not listed - set(read), "docs/environment.md names variables nothing reads"


def test_a_read_through_a_name_of_another_module_is_refused(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\nfrom x import KEY\nos.environ.get(KEY)\n")
    with pytest.raises(AssertionError, match="m.py:3"):
        read_by(path)
