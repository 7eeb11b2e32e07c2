"""A WebDataset field's bytes as a value, by its extension, as `WebDataset(...).decode()` gives it.

The extension is the field's last '.' part (`seg.txt` decodes as `txt`), after a `.gz` is
decompressed (`json.gz` is gzip, then JSON), as WebDataset's default decoder does:

- `txt`, `text`, `transcript`: `str` (UTF-8); `cls`, `cls2`, `index`, `inx`, `id`: `int`;
  `json`, `jsn`: `json.loads`; `npy`: a numpy array, `npz`: a dict of them (object arrays
  refused: numpy's loader is called with `allow_pickle=False`);
- `mp`, `msg`: `msgpack.unpackb` (the `msgpack` package, optional: a shard with such a field
  is refused at open naming `pip install msgpack` where it is missing); `ten`, `tb`: tenbin, a
  list of numpy arrays (`tenbin`); `cbor`: the values the `cbor` package gives (`cbor`, read by
  tpufeed itself, bounded: no package needed);
- a `.gz` field decompresses to at most `MAX_GZ_FIELD_BYTES` (1 GiB), held to that as it
  decompresses (deflate reaches 1032 to 1: a few MB could otherwise make gigabytes), and
  every gzip member's CRC-32 and length are checked;
- images and every other extension: the member's bytes, unchanged. Decode images in the
  workers with `.map(tpufeed.transforms.image.DecodeImage("jpg"))`, as WebDataset's
  `.decode()` without an image spec leaves them bytes too;
- `pickle`, `pyd`, `pkl`, `pth` (pickles, and torch.load's format around one): refused, since
  tpufeed executes nothing read from data. `decode=False` gives every field as bytes.

>>> decoder_for("seg.txt")(b"caf\\xc3\\xa9")
'café'
>>> decoder_for("jpg") is None
True
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tpufeed.errors import MissingDependencyError
from tpufeed.sources.webdataset import cbor, tenbin

__all__ = ["MAX_GZ_FIELD_BYTES", "REFUSED", "decoder_for", "gunzip", "refused", "require"]

REFUSED = frozenset({"pickle", "pyd", "pkl", "pth"})
MAX_GZ_FIELD_BYTES = 1 << 30  # a `.gz` field's most, decompressed


def gunzip(data: bytes) -> bytes:
    """`data`'s gzip members decompressed (as `gzip.decompress`), refused as soon as the output
    would pass `MAX_GZ_FIELD_BYTES`: memory never holds more than the bound."""
    bound = MAX_GZ_FIELD_BYTES
    out: list[bytes] = []
    total = 0
    while data:
        stream = zlib.decompressobj(wbits=31)  # one gzip member: header, deflate, CRC and size
        piece = stream.decompress(data, bound - total + 1)
        total += len(piece)
        if total > bound:
            raise ValueError(
                f"it decompresses to more than {bound:,} bytes, tpufeed's bound for a .gz field "
                "(decode=False gives its compressed bytes)"
            )
        if not stream.eof:
            raise ValueError(f"its gzip stream ends early, after {total:,} bytes decompressed")
        out.append(piece)
        data = stream.unused_data
    return b"".join(out)


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _npy(data: bytes) -> np.ndarray:
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def _npz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}


def _msgpack(data: bytes) -> Any:
    """As WebDataset: `unpackb` with its defaults (extension types stay `ExtType`s; nothing
    runs), whose lengths msgpack bounds by the bytes given."""
    import msgpack  # present: `require` checked it as the shard was opened

    return msgpack.unpackb(data)


_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "txt": _text,
    "text": _text,
    "transcript": _text,
    "cls": int,
    "cls2": int,
    "index": int,
    "inx": int,
    "id": int,
    "json": json.loads,
    "jsn": json.loads,
    "npy": _npy,
    "npz": _npz,
    "mp": _msgpack,
    "msg": _msgpack,
    "ten": tenbin.decode,
    "tb": tenbin.decode,
    "cbor": cbor.decode,
}


def _extension(field: str) -> str:
    return field.rsplit(".", 1)[-1]


def refused(field: str) -> bool:
    """Whether decoding `field` would mean unpickling it."""
    return _extension(field.removesuffix(".gz")) in REFUSED and field != "gz"


def require(field: str, where: str) -> None:
    """Raises `MissingDependencyError` naming `where` (a shard's member) if decoding `field`
    needs a module that is not installed."""
    if _extension(field.removesuffix(".gz")) in ("mp", "msg"):
        try:
            import msgpack  # noqa: F401
        except ImportError:
            raise MissingDependencyError(
                f"{where} is msgpack, and the msgpack package is not installed; install it "
                "with `pip install msgpack` (or pass decode=False to get the field's bytes)"
            ) from None


def decoder_for(field: str) -> Callable[[bytes], Any] | None:
    """The function turning `field`'s bytes into its value; None: the bytes as they are."""
    if field == "gz" or field.endswith(".gz"):
        inner = _DECODERS.get(_extension(field[:-3])) if field != "gz" else None
        if inner is None:
            return gunzip
        return lambda data: inner(gunzip(data))
    return _DECODERS.get(_extension(field))
