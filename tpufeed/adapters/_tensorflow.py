"""TensorFlow, imported and checked on first use: the `tf` extra installs none.

`tensorflow`, `tensorflow-cpu` and `tensorflow-tpu` are three distributions of the same
`tensorflow` package. An extra naming one of them would install it over the one a user already
has (two distributions writing the same files), so the TensorFlow is the user's, whichever
build it is, and tpufeed checks here that one imports and is new enough.
"""

from __future__ import annotations

import re
from typing import Any

from tpufeed.errors import MissingDependencyError

__all__ = ["TENSORFLOW_FLOOR", "import_tensorflow", "require_version"]

# The oldest TensorFlow that CI runs the tf and keras tests on (`.ci/lowest.py`); the dev
# extra's `tensorflow-cpu>=` floor is the same (tests/repository/test_dependencies.py).
TENSORFLOW_FLOOR = "2.16.1"
_BUILDS = "tensorflow, or tensorflow-cpu, or tensorflow-tpu on a TPU VM"


def import_tensorflow() -> Any:
    """The `tensorflow` module, or a `MissingDependencyError` that says how to install one."""
    try:
        import tensorflow as tf
    except ImportError as error:
        raise MissingDependencyError(
            f"TensorFlow could not be imported ({error}); tpufeed's `tf` extra installs no "
            f"TensorFlow, so as not to replace the build you have: install one ({_BUILDS}), "
            f"version {TENSORFLOW_FLOOR} or newer: `pip install tensorflow`"
        ) from error
    require_version(tf.__version__)
    return tf


def require_version(version: str) -> None:
    """Refuses a TensorFlow older than `TENSORFLOW_FLOOR`, naming the version found."""
    if _release(version) < _release(TENSORFLOW_FLOOR):
        raise MissingDependencyError(
            f"TensorFlow {version} is installed; tpufeed needs {TENSORFLOW_FLOOR} or newer: "
            f"upgrade the build you have ({_BUILDS}), e.g. `pip install -U tensorflow`"
        )


def _release(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a version string such as `2.16.1`, `2.20.0-rc1` or `2.19.0.dev20250101`."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if found is None:  # a build that says nothing usable: let it run rather than refuse it
        return (999, 0, 0)
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)
