"""The benchmarks run tpufeed from compiled bytecode, as an installed package runs."""

import importlib.util
import os
import shutil

from benchmarks.bytecode import compile_sources


def test_compile_sources_writes_the_bytecode_an_import_reads(tmp_path):
    for package in ("tpufeed", "benchmarks"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("VALUE = 1\n")
        (tmp_path / package / "part.py").write_text("def f():\n    return 2\n")
    assert compile_sources(str(tmp_path))
    for package in ("tpufeed", "benchmarks"):
        for name in ("__init__.py", "part.py"):
            assert os.path.exists(importlib.util.cache_from_source(str(tmp_path / package / name)))


def test_compile_sources_says_when_a_module_cannot_be_compiled(tmp_path):
    (tmp_path / "tpufeed").mkdir()
    (tmp_path / "tpufeed" / "broken.py").write_text("def f(:\n")
    assert not compile_sources(str(tmp_path))
    shutil.rmtree(tmp_path / "tpufeed")
    assert compile_sources(str(tmp_path))  # no package there: nothing to do
