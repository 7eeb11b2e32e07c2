"""The offline Beam stage: `WriteShards` and the `tpufeed build` pipeline.

Apache Beam is imported on first use of a name that needs it (`pip install tpufeed[beam]`);
`tpufeed.beam.write.ranking` and `tpufeed.beam.write.schema` are pure Python.

>>> import apache_beam as beam, tpufeed.beam  # doctest: +SKIP
>>> with beam.Pipeline(runner=tpufeed.beam.in_process_runner()) as p:  # doctest: +SKIP
...     p | beam.Create(records) | tpufeed.beam.WriteShards("/data/ds", num_shards=8)
"""

from __future__ import annotations

from typing import Any

from tpufeed.beam.beam_import import import_with_beam

__all__ = [
    "BuildConfig",
    "WriteShards",
    "beam_option_names",
    "build",
    "in_process_runner",
    "unknown_beam_args",
]

_LAZY = {
    "WriteShards": "tpufeed.beam.write.write_shards",
    "BuildConfig": "tpufeed.beam.plan.build_config",
    "build": "tpufeed.beam.build_launch",
    "in_process_runner": "tpufeed.beam.build_runner",
    "beam_option_names": "tpufeed.beam.plan.pipeline_args",
    "unknown_beam_args": "tpufeed.beam.plan.pipeline_args",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpufeed.beam' has no attribute {name!r}")
    return getattr(import_with_beam(module), name)
