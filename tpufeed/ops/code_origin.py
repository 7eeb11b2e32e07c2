"""Whose code a module holds: the user's own (followed into, to key the cache by it), or a
library's, known by its version.

A module is a library's when it is part of the standard library (`sys.stdlib_module_names`,
keyed by the Python version), or lives in an installation folder (`sysconfig`'s paths, or any
`site-packages` / `dist-packages` folder): it is keyed by its distribution's version. tpufeed's
own modules count as a library (keyed by tpufeed's version) wherever it is installed from. Any
other module is the user's: a file of their project, a notebook's `__main__`, code made at run
time. Both answers are fixed for a process, so they are worked out once per module.

>>> library_version("numpy.linalg")  # doctest: +SKIP
'numpy 2.4.6'
>>> library_version("my_project.augment") is None  # doctest: +SKIP
True
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig

__all__ = ["library_version"]

_OWN = "tpufeed"
_INSTALL_FOLDERS = ("site-packages", "dist-packages")


@functools.cache
def library_version(module_name: str) -> str | None:
    """What stands for the code of module `module_name` if it is a library's ("numpy 2.4.6",
    "python 3.11.7 ..."); None if it is the user's own."""
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return f"python {sys.version}"
    if top != _OWN and not _installed(module_name):
        return None
    return f"{top} {_distribution_version(top)}"


def _installed(module_name: str) -> bool:
    """Whether the module's file lies in an installation folder (the module need not have been
    imported: a module a function imports in its body is looked up without running it)."""
    module = sys.modules.get(module_name)
    path = _file_of(module) if module is not None else _origin(module_name)
    if not isinstance(path, str):
        return False  # no file: made at run time (a notebook, exec): the user's
    real = os.path.realpath(path)
    if any(folder in real.split(os.sep) for folder in _INSTALL_FOLDERS):
        return True
    return any(real.startswith(root + os.sep) for root in _library_roots())


def _file_of(module: object) -> str | None:
    """A module's file; for a namespace package (no file), a name inside its first folder."""
    path = getattr(module, "__file__", None)
    if path is None:
        folders = list(getattr(module, "__path__", None) or ())
        path = os.path.join(folders[0], "__init__.py") if folders else None
    return path if isinstance(path, str) else None


def _origin(module_name: str) -> str | None:
    try:  # the top package only: finding a submodule would import (run) its parents
        spec = importlib.util.find_spec(module_name.partition(".")[0])
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple({os.path.realpath(paths[name]) for name in names if name in paths})


@functools.cache
def _distribution_version(top: str) -> str:
    """The version of the distribution that installs package `top`: the one named like it, the
    package's `__version__`, or those `importlib.metadata` finds for it (several for a
    namespace package, such as `google`); else its file's size and time."""
    try:
        return importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        pass
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return version
    names = sorted(set(importlib.metadata.packages_distributions().get(top, ())))
    if names:
        return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)
    path = getattr(sys.modules.get(top), "__file__", None) or _origin(top)
    try:
        st = os.stat(path) if isinstance(path, str) else None
    except OSError:
        st = None
    return f"{path} {st.st_size} {st.st_mtime_ns}" if st is not None else "unknown"
