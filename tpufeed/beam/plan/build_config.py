"""`BuildConfig`: what `tpufeed build` builds, checked when it is made.

>>> BuildConfig(inputs=("raw/*.jsonl",), output="ds", num_shards=4)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from tpufeed.beam.read.block_plan import DEFAULT_BLOCK_BYTES
from tpufeed.beam.read.user_transforms import resolve_spec
from tpufeed.beam.workers.worker_check import DEFAULT_TIMEOUT_S
from tpufeed.beam.workers.worker_count import check_workers_setting
from tpufeed.beam.write.shard_size import DEFAULT_MAX_SHARD_BYTES
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.built.record_formats import get_record_format
from tpufeed.sources.formats import get_format

__all__ = ["BuildConfig"]


def _positive_int(value: object, option: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{option} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class BuildConfig:
    """What to build; `beam_args` are Beam pipeline options (`--runner DataflowRunner ...`).
    A folder that already holds a dataset is replaced only with `overwrite=True`.
    `record_format`: "codec" (tpufeed's) or "tf_example" (`tf.train.Example`).
    `num_shards=None` picks shards of about 256 MB of input; a count that would make a shard
    larger than `max_shard_bytes` (what one worker holds while writing it) is refused.
    `workers` local worker processes, or "auto": as many as the input's size pays for (see
    `tpufeed.beam.workers.worker_count`); `block_bytes` is the size of the blocks inputs are cut into.
    `worker_start_timeout` bounds the check that a portable runner's workers can run the build
    (`tpufeed.beam.workers.worker_check`), in seconds."""

    inputs: tuple[str, ...]
    output: str
    num_shards: int | None = None
    file_format: str = "array_record"
    transforms: tuple[str, ...] = ()
    max_bad: int = 0
    beam_args: tuple[str, ...] = ()
    overwrite: bool = False
    record_format: str = "codec"
    workers: int | str = "auto"
    block_bytes: int = DEFAULT_BLOCK_BYTES
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    worker_start_timeout: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str) or not self.inputs:
            raise InvalidArgumentError(
                f"inputs must be a non-empty list of paths or globs, got {self.inputs!r}"
            )
        if self.num_shards is not None:
            _positive_int(self.num_shards, "--num-shards")
        check_workers_setting(self.workers)
        _positive_int(self.block_bytes, "block_bytes")
        _positive_int(self.max_shard_bytes, "max_shard_bytes")
        if get_format(self.file_format, "--format").writer is None:
            raise InvalidArgumentError(f"--format {self.file_format}: tpufeed does not write it")
        get_record_format(self.record_format, "--record-format")
        if not isinstance(self.max_bad, int) or self.max_bad < 0:
            raise InvalidArgumentError(
                f"--max-bad must be a non-negative int, got {self.max_bad!r}"
            )
        timeout = self.worker_start_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidArgumentError(
                f"--worker-start-timeout must be a positive number of seconds, got {timeout!r}"
            )
        if not isinstance(self.overwrite, bool):
            raise InvalidArgumentError(f"overwrite must be True or False, got {self.overwrite!r}")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "transforms", tuple(resolve_spec(t) for t in self.transforms))
        object.__setattr__(self, "beam_args", tuple(self.beam_args))
