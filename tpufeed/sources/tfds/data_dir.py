"""Where TFDS prepares datasets when `from_tfds` is given no `data_dir`: as TFDS decides it."""

from __future__ import annotations

import os

__all__ = ["default_data_dir"]


def default_data_dir() -> str:
    """$TFDS_DATA_DIR, else ~/tensorflow_datasets (TFDS's own default)."""
    return os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")
