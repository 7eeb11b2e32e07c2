"""tpufeed: feed accelerators from the host they are attached to.

Exact, deterministic, resumable input pipelines over ArrayRecord and TFRecord files.
"""

from importlib import import_module as _import_module
from importlib import metadata as _metadata
from typing import Any as _Any

from tpufeed import checkpoint, codec
from tpufeed.dataset import Dataset
from tpufeed.errors import (
    BatchError,
    CodecError,
    CorruptDataError,
    HostLostError,
    InputTimeoutError,
    InvalidArgumentError,
    ObjectChangedError,
    RecordIndexError,
    SourceError,
    SourceNotFoundError,
    StateError,
    TpufeedError,
    TransformError,
    UnknownLengthError,
    WorkerError,
)
from tpufeed.observe.trace_file import trace
from tpufeed.order.state import accept_changed_shards
from tpufeed.run.element_spec import TensorSpec
from tpufeed.run.hosts.pod import pod_stats
from tpufeed.run.iterator import DatasetIterator
from tpufeed.run.metrics import register_metrics, serve_metrics

try:  # one source: pyproject.toml's version, as the installed distribution records it
    __version__ = _metadata.version("tpufeed")
except _metadata.PackageNotFoundError:  # a checkout on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BatchError",
    "CodecError",
    "CorruptDataError",
    "Dataset",
    "DatasetIterator",
    "HostLostError",
    "InputTimeoutError",
    "InvalidArgumentError",
    "ObjectChangedError",
    "RecordIndexError",
    "SourceError",
    "SourceNotFoundError",
    "StateError",
    "TensorSpec",
    "TpufeedError",
    "TransformError",
    "UnknownLengthError",
    "WorkerError",
    "accept_changed_shards",
    "checkpoint",
    "codec",
    "pod_stats",
    "register_metrics",
    "serve_metrics",
    "trace",
    "transforms",
]


def __getattr__(name: str) -> _Any:
    """`tpufeed.transforms` on first use, so that `import tpufeed` then
    `tpufeed.transforms.DecodeImage(...)` works as the guides write it, while `import tpufeed`
    does not import every transform."""
    if name == "transforms":
        return _import_module("tpufeed.transforms")
    raise AttributeError(f"module 'tpufeed' has no attribute {name!r}")
