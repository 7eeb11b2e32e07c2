"""The hosts' modules moved to `tpufeed.run.hosts` (issue 46): the old public paths still give
the same objects for a deprecation period, and warn naming the new one."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

MOVED = {
    "agreement": [
        "HostAgreement",
        "JaxAgreement",
        "ThreadAgreement",
        "TorchAgreement",
        "default_agreement",
    ],
    "uneven": ["LOOKAHEAD", "MASK", "UNEVEN"],
    "torch_store": ["StoreClient"],
}


@pytest.mark.parametrize("module", sorted(MOVED))
def test_the_old_path_gives_the_same_names_and_warns(module):
    old, new = f"tpufeed.run.{module}", f"tpufeed.run.hosts.{module}"
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved = importlib.import_module(old)
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert messages == [f"{old} moved to {new}: import its names from there"]
    target = importlib.import_module(new)
    for name in MOVED[module]:
        assert getattr(moved, name) is getattr(target, name)


def test_the_library_itself_imports_no_old_path():
    """`import tpufeed` and its adapters load none of the deprecated modules."""
    import subprocess

    code = (
        "import sys, warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
        "import tpufeed, tpufeed.adapters.jax, tpufeed.adapters.torch\n"
        "print(sorted(m for m in sys.modules if m in "
        + repr({f"tpufeed.run.{m}" for m in MOVED})
        + "))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
