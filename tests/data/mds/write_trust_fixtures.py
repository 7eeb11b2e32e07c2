"""Writes the MDS fixtures of tests/sources/test_mds_trust.py with MosaicML Streaming itself.

Streaming pins numpy < 2.2, so this runs in an environment of its own:

    python -m venv V && V/bin/pip install torch mosaicml-streaming
    V/bin/python tests/data/mds/write_trust_fixtures.py

Each folder under tests/data/mds/trust/ is written by `streaming.MDSWriter`:

- `big-zstd`, `big-gz`, `big-bz2`: one shard of 64 samples of 1 MiB of zeros each (64 MiB
  raw), compressed to a few KiB (gz: 64 KiB); hashes xxh3_64. The decompression-bomb tests
  declare it smaller in a copy of its index; the kill test stops a process writing its copy.
- `twins-a`, `twins-b`: three shards of two samples each (an int id and 300 random bytes),
  zstd, hashes sha1 and xxh3_64, with the raw files MDSWriter keeps beside the compressed ones
  (the twins, as Streaming's reader leaves them). Their files have the same sizes, one by one,
  and other bytes: the replacement tests put one's files in place of the other's. Their seeds
  are the first two whose shards take the same sizes.

What Streaming's reader gives for every sample of the twins is kept as trust/expected.json
(values tagged by type, as tests/data/mds/write_fixtures.py does).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np
from streaming import MDSWriter, StreamingDataset

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "trust")
sys.path.insert(0, HERE)
from write_fixtures import tagged  # noqa: E402

BIG_SAMPLES, BIG_SAMPLE_BYTES = 64, 1 << 20
TWIN_COLUMNS = {"id": "int", "noise": "bytes"}


def write(name: str, columns: dict[str, str], samples: list[dict[str, Any]], **kw: Any) -> str:
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=out, columns=columns, **kw) as writer:
        for sample in samples:
            writer.write(sample)
    return out


def write_big(algorithm: str) -> None:
    samples = [{"id": i, "zeros": bytes(BIG_SAMPLE_BYTES)} for i in range(BIG_SAMPLES)]
    out = write(
        f"big-{algorithm}",
        {"id": "int", "zeros": "bytes"},
        samples,
        compression=algorithm,
        hashes=["xxh3_64"],
        size_limit=1 << 28,
    )
    for basename in os.listdir(out):  # the compressed shard alone, as after an upload
        if basename.endswith(".mds"):
            os.remove(os.path.join(out, basename))


def twin_samples(seed: int, first_id: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"id": first_id + i, "noise": rng.bytes(300)} for i in range(6)]


def write_twins(out: str, seed: int, first_id: int) -> tuple[int, ...]:
    """Writes a twins folder at `out`; the sizes of its compressed shards."""
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(
        out=out,
        columns=TWIN_COLUMNS,
        compression="zstd",
        hashes=["sha1", "xxh3_64"],
        size_limit=1100,
    ) as writer:
        for sample in twin_samples(seed, first_id):
            writer.write(sample)
    shards = sorted(n for n in os.listdir(out) if n.startswith("shard."))
    return tuple(os.path.getsize(os.path.join(out, n)) for n in shards)


def write_twin_pair() -> None:
    """`twins-a` and `twins-b`: the first seeds (ids from 0 and from 100) whose compressed
    shards take the same sizes, each with the raw files Streaming's reader leaves beside them
    (the twins)."""
    with tempfile.TemporaryDirectory() as scratch:
        seen: dict[tuple[tuple[int, ...], int], int] = {}
        for seed in range(2000):
            for first_id in (0, 100):
                sizes = write_twins(os.path.join(scratch, "candidate"), seed, first_id)
                seen.setdefault((sizes, first_id), seed)
                pair = seen.get((sizes, 100 - first_id))
                if pair is not None:
                    seeds = {first_id: seed, 100 - first_id: pair}
                    break
            else:
                continue
            break
        else:
            sys.exit("no two seeds give twins-a and twins-b shards of the same sizes")
    print(f"twins-a: seed {seeds[0]}, twins-b: seed {seeds[100]}, shards of {sizes} bytes")
    for name, first_id in (("twins-a", 0), ("twins-b", 100)):
        out = os.path.join(OUT, name)
        write_twins(out, seeds[first_id], first_id)
        dataset = StreamingDataset(local=out, shuffle=False, batch_size=1)
        for i in range(len(dataset)):  # Streaming decompresses each shard beside its zip
            dataset[i]


def read_back(name: str) -> list[Any]:
    """`dataset[i]` for every i, read by Streaming from a copy (it writes beside the shards)."""
    with tempfile.TemporaryDirectory() as scratch:
        local = os.path.join(scratch, name)
        shutil.copytree(os.path.join(OUT, name), local)
        dataset = StreamingDataset(local=local, shuffle=False, batch_size=1)
        return [tagged(dict(dataset[i])) for i in range(len(dataset))]


def main() -> None:
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    for algorithm in ("zstd", "gz", "bz2"):
        write_big(algorithm)
    write_twin_pair()
    expected = {name: read_back(name) for name in ("twins-a", "twins-b")}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
