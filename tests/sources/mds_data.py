"""What the MDS tests share: the folders Streaming's own MDSWriter wrote (tests/data/mds/, by
write_fixtures.py; tests/data/mds/trust/, by write_trust_fixtures.py), what Streaming's reader
gave for them, and how a test copies and damages them."""

from __future__ import annotations

import json
import pathlib
import shutil
from decimal import Decimal
from typing import Any

import numpy as np

from tpufeed.transforms.image import decode_image

DATA = pathlib.Path(__file__).parent.parent / "data" / "mds"
EXPECTED = json.loads((DATA / "expected.json").read_text())
TRUST_EXPECTED = json.loads((DATA / "trust" / "expected.json").read_text())


def tagged(value: Any, like: Any) -> Any:
    """tpufeed's value in the tagged JSON form of write_fixtures.py, images decoded to pixels
    where Streaming's reader gave a Pillow image (`like`: its tagged value)."""
    if isinstance(like, dict) and "__image__" in like:
        pixels = decode_image(value, like["__image__"]) if isinstance(value, bytes) else value
        pixels = pixels.reshape(like["shape"])  # Pillow's "L" has no channel axis
        return {
            "__image__": like["__image__"],
            "shape": list(pixels.shape),
            "values": pixels.tolist(),
        }
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
        return [tagged(v, w) for v, w in zip(value, like)] + [None] * (len(value) - len(like))
    if isinstance(value, dict):
        return {
            k: tagged(v, like.get(k) if isinstance(like, dict) else None) for k, v in value.items()
        }
    return value


def assert_like_streaming(records: list[dict], expected: list[dict]) -> None:
    assert len(records) == len(expected)
    for i, (mine, theirs) in enumerate(zip(records, expected)):
        assert sorted(mine) == sorted(theirs), i
        for key in theirs:
            assert tagged(mine[key], theirs[key]) == theirs[key], (i, key)


def copy_of(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / name
    shutil.copytree(DATA / name, folder)
    return folder


def edit_index(folder: pathlib.Path, edit) -> None:
    index = json.loads((folder / "index.json").read_text())
    edit(index)
    (folder / "index.json").write_text(json.dumps(index))


def flip(path: pathlib.Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
