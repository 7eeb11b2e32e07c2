"""Writes the MDS fixtures of tests/sources/test_mds.py with MosaicML Streaming itself.

Streaming pins numpy < 2.2, so this runs in an environment of its own:

    python -m venv V && V/bin/pip install torch mosaicml-streaming
    V/bin/python tests/data/mds/write_fixtures.py

Each folder under tests/data/mds/ is written by `streaming.MDSWriter`, then read back by
`streaming.StreamingDataset` (`dataset[i]` for every i, and one unshuffled pass, which must
give the same order); what Streaming's reader gave is kept as `expected.json` beside the
folders, values tagged by type (`tagged`), which the always-running tests compare tpufeed with.

- `plain`: every column type but `pkl`, three shards, hashes md5, sha1 and xxh64;
- `zstd`, `gz`: compressed shards (xxh3_64, md5), raw files removed as after an upload;
- `nested/part-a`, `nested/part-b`: two sub-datasets, no index.json at the top;
- `pkl`: a `pkl` column, which tpufeed refuses by name;
- `conformance`: tests/sources/test_conformance.py's records (tpufeed's codec, imported from
  this checkout) in a `bytes` column, three shards.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from decimal import Decimal
from typing import Any

import numpy as np
from PIL import Image
from streaming import MDSWriter, StreamingDataset

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

ALL_COLUMNS = {
    "bytes": "bytes",
    "str": "str",
    "int": "int",
    **{f"s_{t}": t for t in ("uint8", "uint16", "uint32", "uint64", "int8", "int16")},
    **{f"s_{t}": t for t in ("int32", "int64", "float16", "float32", "float64")},
    "nd_fixed": "ndarray:float32:2,3",
    "nd_dtype": "ndarray:int16",
    "nd_any": "ndarray",
    "str_int": "str_int",
    "str_float": "str_float",
    "str_decimal": "str_decimal",
    "json": "json",
    "jpeg": "jpeg",
    "png": "png",
    "pil": "pil",
    "pil_l": "pil",
    "list_jpeg": "list[jpeg]",
    "list_png": "list[png]",
    "list_pil": "list[pil]",
    "jpeg_array": "jpeg_array",
}


def image(i: int, mode: str = "RGB", side: int = 4) -> Image.Image:
    rng = np.random.default_rng(i)
    shape = (side, side + 1) if mode == "L" else (side, side + 1, len(mode))
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


def jpeg_bytes(i: int) -> bytes:
    import io

    out = io.BytesIO()
    image(i).save(out, format="JPEG")
    return out.getvalue()


def full_sample(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(1000 + i)
    any_dtype = ["uint8", "int32", "float64", "uint16"][i % 4]
    sample = {
        "bytes": bytes(range(i % 7)) + b"\x00\xff",
        "str": f"sample {i} \u00e9\u4e2d" * (i % 3 + 1),
        "int": (-1) ** i * (i << 40),
        "nd_fixed": rng.standard_normal((2, 3)).astype(np.float32),
        "nd_dtype": np.arange(i % 5 + 1, dtype=np.int16) - 3,
        "nd_any": (rng.integers(0, 300, (i % 3 + 1, 2, 300 if i == 4 else 2))).astype(any_dtype),
        "str_int": 10**30 + i,
        "str_float": i / 7,
        "str_decimal": Decimal(f"{i}.{i:03d}"),
        "json": {"i": i, "tags": ["a", "b"][: i % 3], "nested": {"x": None, "y": [1.5, True]}},
        "jpeg": image(i),
        "png": image(i + 100, "RGBA"),
        "pil": image(i + 200),
        "pil_l": image(i + 300, "L"),
        "list_jpeg": [image(i + 400 + k) for k in range(i % 3 + 1)],
        "list_png": [image(i + 500 + k, "L") for k in range(2)],
        "list_pil": [image(i + 600 + k) for k in range(i % 2 + 1)],
        "jpeg_array": [jpeg_bytes(i + 700 + k) for k in range(2)],
    }
    for name, kind in ALL_COLUMNS.items():
        if name.startswith("s_"):
            value = (i * 37 + 5) % 120 if "int" in kind else i * 0.25 - 1
            sample[name] = getattr(np, kind)(value)
    return sample


def tagged(value: Any) -> Any:
    """A JSON form of a value Streaming's reader gave, its type kept."""
    if isinstance(value, Image.Image):
        pixels = np.asarray(value)
        return {"__image__": value.mode, "shape": list(pixels.shape), "values": pixels.tolist()}
    if isinstance(value, np.ndarray):
        return {
            "__ndarray__": value.dtype.str,
            "shape": list(value.shape),
            "values": value.tolist(),
        }
    if isinstance(value, np.generic):
        return {"__scalar__": value.dtype.str, "value": value.item()}
    if isinstance(value, bytes):
        return {"__bytes__": value.hex()}
    if isinstance(value, Decimal):
        return {"__decimal__": str(value)}
    if isinstance(value, int) and not isinstance(value, bool):
        return {"__int__": str(value)}
    if isinstance(value, list):
        return [tagged(v) for v in value]
    if isinstance(value, dict):
        return {k: tagged(v) for k, v in value.items()}
    return value


def write(name: str, columns: dict[str, str], samples: list[dict[str, Any]], **kw: Any) -> None:
    out = os.path.join(HERE, name)
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=out, columns=columns, **kw) as writer:
        for sample in samples:
            writer.write(sample)
    if kw.get("compression"):  # as after an upload with keep_local=False: the zips alone
        for basename in os.listdir(out):
            if basename.endswith(".mds"):
                os.remove(os.path.join(out, basename))


def read_back(name: str) -> list[Any]:
    """`dataset[i]` for every i, checked against one unshuffled pass of the dataset."""
    local = os.path.join(HERE, name)
    dataset = StreamingDataset(local=local, shuffle=False, batch_size=1)
    by_index = [tagged(dict(dataset[i])) for i in range(len(dataset))]
    iterated = [tagged(dict(sample)) for sample in dataset]
    if iterated != by_index:
        sys.exit(f"{name}: StreamingDataset's unshuffled pass differs from dataset[i]")
    # Streaming leaves its copies of compressed shards decompressed in place: remove them.
    for basename in os.listdir(local):
        if basename.endswith(".mds") and any(
            n.endswith(".mds.zstd") or n.endswith(".mds.gz") for n in os.listdir(local)
        ):
            os.remove(os.path.join(local, basename))
    return by_index


def conformance_records() -> list[dict[str, bytes]]:
    """test_conformance.py's RECORDS, encoded by this checkout's tpufeed.codec."""
    sys.path.insert(0, CHECKOUT)
    from tpufeed import codec

    return [
        {"record": codec.encode({"id": i, "x": np.full(i % 7, i, np.int16)})} for i in range(90)
    ]


def main() -> None:
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    full = [full_sample(i) for i in range(9)]
    small_columns = {"id": "int", "text": "str", "vec": "ndarray:float32:4", "img": "jpeg"}
    small = [
        {"id": i, "text": f"t{i}" * (i + 1), "vec": np.full(4, i, np.float32), "img": image(i)}
        for i in range(12)
    ]
    write("plain", ALL_COLUMNS, full, hashes=["md5", "sha1", "xxh64"], size_limit=17000)
    write("zstd", small_columns, small, compression="zstd", hashes=["xxh3_64"], size_limit=4000)
    write("gz", small_columns, small, compression="gz:6", hashes=["md5"], size_limit=4000)
    write("nested/part-a", small_columns, small[:5], size_limit=2500)
    write("nested/part-b", small_columns, small[5:], hashes=["sha1"], size_limit=2500)
    write("pkl", {"id": "int", "obj": "pkl"}, [{"id": 0, "obj": {"a": 1}}])
    write("conformance", {"record": "bytes"}, conformance_records(), size_limit=1400)
    expected = {
        name: read_back(name) for name in ("plain", "zstd", "gz", "nested/part-a", "nested/part-b")
    }
    expected["nested"] = expected.pop("nested/part-a") + expected.pop("nested/part-b")
    expected["columns"] = {"plain": ALL_COLUMNS, "small": small_columns}
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
