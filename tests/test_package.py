"""The package as a user first meets it: `import tpufeed`, then the names the guides write."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_transforms_are_reached_from_import_tpufeed_as_the_guides_write_them():
    """Issue 47: `import tpufeed; tpufeed.transforms.X` failed, though three guides write it."""
    code = (
        "import sys, tpufeed\n"
        "assert 'tpufeed.transforms' not in sys.modules, 'imported by import tpufeed'\n"
        "print(tpufeed.transforms.DecodeImage.__name__, tpufeed.transforms.Cast.__name__)\n"
        "assert tpufeed.transforms is sys.modules['tpufeed.transforms']\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["DecodeImage", "Cast"]


def test_a_name_tpufeed_has_not_is_an_attribute_error_naming_it():
    import tpufeed

    with pytest.raises(AttributeError, match="module 'tpufeed' has no attribute 'tranforms'"):
        tpufeed.tranforms  # noqa: B018
    assert "transforms" in tpufeed.__all__
