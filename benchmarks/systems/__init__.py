"""The rows of the comparison: each names the module and function that yields its batches.

A runner is `fn(spec: RowSpec) -> Iterator[batch]`, covering `spec.epochs` epochs from one
iterator; its module has `load()`, which imports the framework (timed on its own). Modules are
imported by name only in the subprocess that runs their row, so no framework is imported in the
parent or in another system's row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from benchmarks.datafiles import DataFiles


@dataclass(frozen=True)
class System:
    """One row kind. `kind`: limit, tpufeed, anchor (same Python fn), reference (TF ops) or
    format-anchor (another library on its own shard format: compared with the tpufeed row on
    the same shards, not counted among the anchors). `workloads`: the only ones it runs (None:
    all). `python_env`: the variable naming the python its row runs under, for a library that
    needs an environment of its own (`PYTHONS` gives the default)."""

    name: str
    kind: str
    module: str
    runner: str
    parallel: bool
    label: str
    workloads: tuple[str, ...] | None = None
    python_env: str | None = None


@dataclass(frozen=True)
class RowSpec:
    """Everything a row's subprocess needs: which system, on which data, with how many workers."""

    system: str
    workload: str
    workers: int
    epochs: int
    seed: int
    data: DataFiles

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RowSpec:
        return cls(
            data["system"],
            data["workload"],
            data["workers"],
            data["epochs"],
            data["seed"],
            DataFiles.from_json(data["data"]),
        )


SYSTEMS = {
    s.name: s
    for s in [
        System(
            "raw-reader",
            "limit",
            "benchmarks.systems.limits",
            "raw_reader",
            False,
            "array_record reader, batched reads of 256, no decode",
        ),
        System(
            "bare-loop",
            "limit",
            "benchmarks.systems.limits",
            "bare_loop",
            False,
            "plain Python loop: raw reader + same per-record fn + np.stack",
        ),
        System(
            "bare-parallel",
            "limit",
            "benchmarks.systems.limits",
            "bare_parallel",
            True,
            "N bare loops side by side in N processes, each on every N-th batch",
        ),
        System(
            "tpufeed",
            "tpufeed",
            "benchmarks.systems.tpufeed_system",
            "batches",
            True,
            "Dataset.from_array_record ... batch(256)",
        ),
        System(
            "tpufeed-parquet",
            "tpufeed",
            "benchmarks.systems.tpufeed_system",
            "parquet_batches",
            True,
            "Dataset.from_parquet (column 'record', row groups of 1,024) ... batch(256)",
        ),
        System(
            "tpufeed-auto",
            "tpufeed",
            "benchmarks.systems.tpufeed_system",
            "batches_auto",
            False,
            "the same with .workers('auto').prefetch('auto')",
        ),
        System(
            "grain-map",
            "anchor",
            "benchmarks.systems.grain_system",
            "map_dataset",
            True,
            "MapDataset.source ... to_iter_dataset (+mp_prefetch)",
        ),
        System(
            "grain-loader",
            "anchor",
            "benchmarks.systems.grain_system",
            "data_loader",
            True,
            "grain.DataLoader, IndexSampler, worker_count",
        ),
        System(
            "tfdata",
            "anchor",
            "benchmarks.systems.tfdata_system",
            "numpy_function",
            True,
            "TFRecordDataset + tf.numpy_function(same fn), num_parallel_calls",
        ),
        System(
            "tfdata-ops",
            "reference",
            "benchmarks.systems.tfdata_system",
            "tf_ops",
            True,
            "TFRecordDataset + the work rewritten in TF ops",
        ),
        System(
            "torch",
            "anchor",
            "benchmarks.systems.torch_system",
            "batches",
            True,
            "DataLoader, map-style Dataset (__getitems__) over the ArrayRecord shards",
        ),
        System(
            "tpufeed-tar",
            "tpufeed",
            "benchmarks.systems.tpufeed_system",
            "tar_batches",
            True,
            "Dataset.from_webdataset (TarWriter's shards, field 'bin') .shuffle ... batch(256)",
        ),
        System(
            "wds",
            "anchor",
            "benchmarks.systems.wds_system",
            "batches",
            True,
            "WebDataset(shardshuffle) .shuffle(1000) .batched(256), DataLoader workers",
        ),
        System(
            "tpufeed-mds",
            "tpufeed",
            "benchmarks.systems.tpufeed_system",
            "mds_batches",
            True,
            "Dataset.from_mds (MDSWriter's shards, column 'record') .shuffle() ... batch(256)",
            workloads=("W1",),
        ),
        System(
            "streaming-mds",
            "format-anchor",
            "benchmarks.systems.streaming_system",
            "batches",
            True,
            "StreamingDataset (naive shuffle) + torch DataLoader, on the same MDS shards",
            workloads=("W1",),
            python_env="TPUFEED_STREAMING_PYTHON",
        ),
    ]
}

# The python of a row whose System names a `python_env` that is not set.
PYTHONS = {"TPUFEED_STREAMING_PYTHON": "/work/venv-streaming/bin/python"}
