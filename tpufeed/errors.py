"""Every error tpufeed raises derives from `TpufeedError`, and names what caused it.

The bottom layer of the package: it imports nothing of tpufeed, so every module can raise
these errors. `plural` lives here too, for the same reason: it words the counts that messages
(and the command's output) quote, `1 shard` or `3 entries`.
"""

from __future__ import annotations


class TpufeedError(Exception):
    """Base class of all tpufeed errors."""


class InvalidArgumentError(TpufeedError, ValueError):
    """A user-supplied argument is out of range or of the wrong kind; the message quotes it."""


class SourceError(TpufeedError):
    """A data file cannot be read: missing, truncated, corrupted. Names the path and record."""

    def __init__(self, message: str, *, path: str | None = None, record: int | None = None):
        super().__init__(message)
        self.path = path
        self.record = record


class SourceNotFoundError(SourceError, FileNotFoundError):
    """A path or glob names no file."""


class CorruptDataError(SourceError):
    """A file's bytes disagree with its format: bad CRC, torn record, truncated file."""


class ObjectChangedError(SourceError):
    """An object (gs://, s3://) was replaced or deleted while it was read; names both versions
    (GCS generations, S3 ETags)."""


class RecordIndexError(TpufeedError, IndexError):
    """A record index outside [0, len(source))."""


class CodecError(TpufeedError, ValueError):
    """A record cannot be encoded, or bytes do not decode as a tpufeed record."""


class StateError(TpufeedError, ValueError):
    """An iterator state that does not belong to this dataset, or is malformed."""


class UnknownLengthError(TpufeedError, TypeError):
    """`len()` of a pipeline that has none: it repeats forever, or the data decides its count
    (filter, flat_map, pack, mix, ignore_errors); the message names which."""


class TransformError(TpufeedError):
    """A user function raised; carries the record index, its file and the original traceback."""

    def __init__(
        self,
        message: str,
        *,
        record: int | None = None,
        path: str | None = None,
        traceback_text: str | None = None,
    ):
        super().__init__(message)
        self.record = record
        self.path = path
        self.traceback_text = traceback_text


class BatchError(TpufeedError, ValueError):
    """Elements that cannot be stacked into one batch; names the key and the shapes."""


class WorkerError(TpufeedError):
    """A worker process died or failed outside a user function."""


class InputTimeoutError(TpufeedError, TimeoutError):
    """`next()` waited longer than `options(timeout_s=...)`; names the stage and the record that
    was being worked on, and how long it had been."""

    def __init__(
        self,
        message: str,
        *,
        stage: str | None = None,
        record: int | None = None,
        path: str | None = None,
    ):
        super().__init__(message)
        self.stage = stage
        self.record = record
        self.path = path


class HostLostError(TpufeedError):
    """A host of a multi-host run stopped taking part: it died, was stopped, lost its network,
    or no longer iterates. `hosts` holds the process indices that stopped answering, `step` the
    agreement step this process was waiting at."""

    def __init__(self, message: str, *, hosts: tuple[int, ...] = (), step: int | None = None):
        super().__init__(message)
        self.hosts = hosts
        self.step = step


class MissingDependencyError(TpufeedError, ImportError):
    """An optional framework is needed; the message says which extra to install."""


def missing_dependency(module: str, extra: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"{module} is not installed; install it with `pip install tpufeed[{extra}]`"
    )


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 file`, `2 files`, `1,024 records`; `nouns` for an irregular plural.

    >>> plural(1, "shard"), plural(3, "entry", "entries")
    ('1 shard', '3 entries')
    """
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
