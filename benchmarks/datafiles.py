"""The benchmark data: generated once per (workload, record count) into a cache folder.

Records are written twice with the same bytes: as ArrayRecord shards (group_size 1) and as
TFRecord shards for tf.data. A folder counts as complete once its `done.json` exists (written
last, atomically), so an interrupted generation is redone rather than trusted.

On request (`prepare(..., parquet=True)`, for the tpufeed-parquet row) the same bytes also go
into Parquet shards: one binary column `record`, row groups of 1,024 rows. Each is written to a
`.tmp` name and renamed, so an existing file is complete; missing ones are written on demand.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np

from benchmarks.workloads import Workload

SHARDS = 8
_DONE = "done.json"
_CHUNK = 4096  # records generated at a time
PARQUET_ROW_GROUP = 1024  # divides _CHUNK: every row group but a shard's last is full


@dataclass(frozen=True)
class DataFiles:
    """The shards of one workload: the same records as ArrayRecord, TFRecord and (written
    only on request) Parquet."""

    workload: str
    records: int
    array_record: tuple[str, ...]
    tfrecord: tuple[str, ...]
    counts: tuple[int, ...]
    parquet: tuple[str, ...] = ()
    tar: tuple[str, ...] = ()  # WebDataset shards: sample `%08d` (global index), field `bin`
    mds: str = ""  # an MDS dataset folder of the same records, when written (`write_mds`)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> DataFiles:
        return cls(
            data["workload"],
            data["records"],
            tuple(data["array_record"]),
            tuple(data["tfrecord"]),
            tuple(data["counts"]),
            tuple(data.get("parquet", ())),
            tuple(data.get("tar", ())),
            data.get("mds", ""),
        )


def shard_counts(records: int, shards: int = SHARDS) -> list[int]:
    """Records per shard: as even as possible, the larger shards first."""
    base, extra = divmod(records, shards)
    return [base + (s < extra) for s in range(shards)]


def prepare(
    workload: Workload,
    records: int,
    root: str,
    seed: int,
    parquet: bool = False,
    tar: bool = False,
) -> DataFiles:
    """The workload's shards under `root`, generated first if they are not there yet
    (the Parquet shards only with `parquet`, the WebDataset tar shards only with `tar`)."""
    if records < SHARDS:
        raise ValueError(f"--records must be at least {SHARDS} (one per shard), got {records}")
    folder = os.path.join(root, f"{workload.name}-{records}-seed{seed}")
    counts = shard_counts(records)
    names = [f"shard-{s:05d}-of-{SHARDS:05d}" for s in range(SHARDS)]
    files = DataFiles(
        workload.name,
        records,
        tuple(os.path.join(folder, f"{n}.array_record") for n in names),
        tuple(os.path.join(folder, f"{n}.tfrecord") for n in names),
        tuple(counts),
        tuple(os.path.join(folder, f"{n}.parquet") for n in names),
        tuple(os.path.join(folder, f"{n}.tar") for n in names),
    )
    if not os.path.exists(os.path.join(folder, _DONE)):
        _generate(workload, files, folder, seed)
    missing = [s for s, path in enumerate(files.parquet) if not os.path.exists(path)]
    if parquet and missing:
        print(
            f"writing {len(missing)} Parquet shards of {workload.name} into {folder} ...",
            flush=True,
        )
        # In a spawned process: pyarrow's import and memory stay out of this one, whose size
        # every row's process starts from (see _generate).
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.starmap(
                _write_parquet_shard,
                [(workload.name, seed, s, files.counts[s], files.parquet[s]) for s in missing],
            )
    missing_tar = [s for s, path in enumerate(files.tar) if not os.path.exists(path)]
    if tar and missing_tar:
        print(f"writing {len(missing_tar)} WebDataset shards of {workload.name} ...", flush=True)
        first = [sum(files.counts[:s]) for s in range(SHARDS)]
        with multiprocessing.get_context("spawn").Pool(1) as pool:  # as for Parquet above
            pool.starmap(
                _write_tar_shard,
                [
                    (workload.name, seed, s, files.counts[s], first[s], files.tar[s])
                    for s in missing_tar
                ],
            )
    return files


def _write_tar_shard(
    workload_name: str, seed: int, shard: int, count: int, first: int, path: str
) -> None:
    """One shard written by webdataset.TarWriter itself: each record a sample of one member."""
    import webdataset

    from benchmarks.workloads import WORKLOADS

    records = _shard_records(WORKLOADS[workload_name], seed, shard, count)
    tmp = f"{path}.tmp"
    with webdataset.TarWriter(tmp) as sink:
        for i, record in enumerate(records):
            sink.write({"__key__": f"{first + i:08d}", "bin": record})
    os.replace(tmp, path)


def _write_parquet_shard(workload_name: str, seed: int, shard: int, count: int, path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.workloads import WORKLOADS

    records = list(_shard_records(WORKLOADS[workload_name], seed, shard, count))
    tmp = f"{path}.tmp"
    pq.write_table(
        pa.table({"record": pa.array(records, pa.binary())}), tmp, row_group_size=PARQUET_ROW_GROUP
    )
    os.replace(tmp, path)


def _generate(workload: Workload, files: DataFiles, folder: str, seed: int) -> None:
    # Imported here, not at the top: every row's process imports this module (for DataFiles),
    # and the anchors' rows must not carry tpufeed's import cost or memory.
    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.tfrecord import write_tfrecords

    if os.path.isdir(folder):
        shutil.rmtree(folder)  # a generation that did not finish
    os.makedirs(folder)
    print(f"generating {files.records:,} {workload.name} records into {folder} ...", flush=True)
    for shard, (ar_path, tf_path, count) in enumerate(
        zip(files.array_record, files.tfrecord, files.counts)
    ):
        # Each file gets the shard's records from its own identical stream, a chunk at a time:
        # compare.py starts every row from this process, and a forked child's peak RSS starts
        # at its parent's size, so this process stays small.
        write_array_records(
            ar_path, _shard_records(workload, seed, shard, count), options="group_size:1"
        )
        write_tfrecords(tf_path, _shard_records(workload, seed, shard, count))
    tmp = os.path.join(folder, f"{_DONE}.tmp")
    with open(tmp, "w") as f:
        json.dump(files.to_json(), f, indent=1)
    os.replace(tmp, os.path.join(folder, _DONE))


def _shard_records(workload: Workload, seed: int, shard: int, count: int) -> Iterator[bytes]:
    rng = np.random.default_rng((seed, int.from_bytes(workload.name.encode(), "little"), shard))
    for start in range(0, count, _CHUNK):
        yield from workload.make_records(rng, min(_CHUNK, count - start))


def write_mds(workload: Workload, files: DataFiles, seed: int, python: str) -> DataFiles:
    """`files` with an MDS folder of the same records in the same order (one `bytes` column
    `record`, shards of about the ArrayRecord shards' size), written by MosaicML Streaming's
    MDSWriter under `python` (Streaming pins an older numpy) unless it is there already."""
    import subprocess
    import sys

    folder = os.path.join(os.path.dirname(files.array_record[0]), "mds")
    if not os.path.exists(os.path.join(folder, _DONE)):
        print(f"writing MDS shards of {workload.name} into {folder} with {python} ...", flush=True)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        subprocess.run(
            [python, "-m", "benchmarks.mds_data", folder, workload.name, str(seed)]
            + [str(c) for c in files.counts],
            cwd=root,
            env={**os.environ, "PYTHONPATH": root},
            check=True,
            stdout=sys.stdout,
            stderr=sys.stderr,
        )
    return DataFiles(**{**asdict(files), "mds": folder})
