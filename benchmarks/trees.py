"""Another checkout's tpufeed, whole, for a benchmark run of it beside this one.

An editable install maps `tpufeed.transforms` to its own checkout's transforms/ folder, whatever
tpufeed a process imports: a process, or its workers, that puts another checkout first on
sys.path gets that checkout's tpufeed with this one's transforms. `library(tree, folder)` makes
`folder/tpufeed`, links to the tree's modules and its transforms/ as `tpufeed/transforms`, so
a process whose sys.path starts with `folder` (its workers get the parent's sys.path) runs
the tree's code and nothing else. Nothing in the tree changes.

>>> import tempfile  # doctest: +SKIP
>>> folder = library("/tmp/before", tempfile.mkdtemp())  # doctest: +SKIP
"""

from __future__ import annotations

import os

__all__ = ["library"]


def library(tree: str, folder: str) -> str:
    """`folder`, now holding `tpufeed/` made of links into checkout `tree`; returns it."""
    source = os.path.join(os.path.abspath(tree), "tpufeed")
    if not os.path.isfile(os.path.join(source, "__init__.py")):
        raise SystemExit(f"{tree} holds no tpufeed package: not a tpufeed checkout")
    package = os.path.join(folder, "tpufeed")
    os.makedirs(package)
    for name in os.listdir(source):
        if name != "__pycache__":
            os.symlink(os.path.join(source, name), os.path.join(package, name))
    os.symlink(
        os.path.join(os.path.abspath(tree), "transforms"), os.path.join(package, "transforms")
    )
    return folder
