"""tpufeed: feed accelerators from the host they are attached to.

Exact, deterministic, resumable input pipelines over ArrayRecord and TFRecord files.
"""

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
from tpufeed.run.iterator import DatasetIterator
from tpufeed.run.metrics import register_metrics, serve_metrics

__version__ = "0.1.0"

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
    "register_metrics",
    "serve_metrics",
    "trace",
]
