"""`adapters/_tensorflow.py`: whichever TensorFlow build the user has, checked on first use."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tpufeed
from tpufeed.adapters._tensorflow import TENSORFLOW_FLOOR, import_tensorflow, require_version
from tpufeed.errors import MissingDependencyError

tf = pytest.importorskip("tensorflow")


def small() -> tpufeed.Dataset:
    return tpufeed.Dataset.from_sequence(list(range(8))).map(np.int64).batch(4)


@pytest.mark.parametrize(
    "version", [TENSORFLOW_FLOOR, "2.16.2", "2.21.0", "2.20.0-rc1", "2.19.0.dev20250101", "3.0"]
)
def test_the_floor_and_newer_builds_pass(version):
    require_version(version)


@pytest.mark.parametrize("version", ["2.16.0", "2.15.1", "2.9.3", "1.15.5"])
def test_an_older_tensorflow_is_refused_naming_its_version(version):
    with pytest.raises(
        MissingDependencyError,
        match=rf"TensorFlow {version} is installed; tpufeed needs {TENSORFLOW_FLOOR}",
    ):
        require_version(version)


def test_the_installed_tensorflow_is_the_one_returned():
    assert import_tensorflow() is tf


def test_to_tf_without_tensorflow_says_to_install_one(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # what `import` sees with none installed
    with pytest.raises(MissingDependencyError) as raised:
        small().to_tf()
    message = str(raised.value)
    assert "extra installs no TensorFlow" in message
    assert "tensorflow-cpu" in message and "tensorflow-tpu" in message
    assert f"version {TENSORFLOW_FLOOR} or newer: `pip install tensorflow`" in message


def test_to_tf_with_an_old_tensorflow_is_refused(monkeypatch):
    monkeypatch.setattr(tf, "__version__", "2.15.1")
    with pytest.raises(MissingDependencyError, match="TensorFlow 2.15.1 is installed"):
        small().to_tf()


def test_the_keras_adapter_without_tensorflow_says_to_install_one(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.delitem(sys.modules, "tpufeed.adapters.keras", raising=False)
    with pytest.raises(MissingDependencyError, match="extra installs no TensorFlow"):
        import tpufeed.adapters.keras  # noqa: F401
