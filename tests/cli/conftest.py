"""Fixtures the command's tests share."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder on a read-only file system (a tmpfs mounted read-only: root can write to a
    folder without write permission, but not there)."""
    path = tmp_path / "ro"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)
