"""Image transforms on dict elements: decode, resize, crop, flip, normalise (Pillow, an extra).

Images are numpy arrays of shape (height, width, channels). Deterministic transforms are
`fn(element)` (for `Dataset.map` and `tpufeed build --transform`); random ones are
`fn(element, rng)` (for `Dataset.random_map`, and in a build they get an rng fixed by the
record's position in the input, so the build stays deterministic).

>>> ds = (tpufeed.Dataset.open("imagenet-shards")  # doctest: +SKIP
...       .map(DecodeImage()).random_map(RandomCrop((224, 224))).random_map(RandomFlip())
...       .map(Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))))
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from tpufeed.errors import InvalidArgumentError, missing_dependency
from tpufeed.ops.rows import RowFor

__all__ = [
    "CenterCrop",
    "DecodeImage",
    "Normalize",
    "RandomCrop",
    "RandomFlip",
    "Resize",
    "decode_image",
    "encoded_bytes",
    "load_pillow",
    "opencv",
]

_RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")


def load_pillow() -> Any:
    """The `PIL.Image` module, or an error naming the extra to install."""
    try:
        from PIL import Image
    except ImportError:
        raise missing_dependency("PIL", "images") from None
    return Image


@lru_cache(maxsize=1)
def opencv() -> Any:
    """The `cv2` module, or None when OpenCV is not installed (imported once, on first use)."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def encoded_bytes(value: Any, key: str, what: str) -> bytes | None:
    """The encoded image in `value`: bytes as they are, or the `bytes` of a Hugging Face Image
    column's `{"bytes", "path"}` dict (what `from_parquet` and `from_huggingface` give for
    one); None for anything else (a decoded array). An image stored by path alone is refused:
    tpufeed decodes the bytes in the data, and never opens a file the data names."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if not isinstance(value, dict) or "bytes" not in value:
        return None
    data = value["bytes"]
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(
        f"{what}: {key!r} holds no image bytes, only a path ({value.get('path')!r}): tpufeed "
        "decodes the bytes stored in the data and opens no file it names; store the images "
        "whole (datasets embeds them in the Parquet files push_to_hub and to_parquet write)"
    )


def decode_image(data: bytes | dict[str, Any], mode: str = "RGB") -> np.ndarray:
    """uint8 array (height, width, channels) of an encoded image (JPEG, PNG, GIF, BMP, WebP...):
    bytes, or a Hugging Face Image column's `{"bytes": ..., "path": ...}` dict."""
    if isinstance(data, dict):
        found = encoded_bytes(data, "image", "decode_image")
        if found is None:
            raise TypeError(f"decode_image: a dict needs 'bytes' and 'path', got {sorted(data)}")
        data = found
    image_module = load_pillow()
    try:
        with image_module.open(io.BytesIO(data)) as image:
            array = np.asarray(image.convert(mode))
    except Exception as e:  # noqa: BLE001 - Pillow raises many kinds for bad input
        raise ValueError(
            f"cannot decode image ({len(data)} bytes, starting "
            f"{bytes(data[:8])!r}): {type(e).__name__}: {e}"
        ) from None
    return array[:, :, None] if array.ndim == 2 else array


def _image(element: Any, key: str, what: str) -> np.ndarray:
    if not isinstance(element, dict):
        raise TypeError(f"{what} needs a dict element, got {type(element).__name__}")
    if key not in element:
        raise KeyError(f"{what}: key {key!r} is missing (the element has {sorted(element)})")
    image = element[key]
    if not isinstance(image, np.ndarray) or image.ndim != 3:
        raise ValueError(
            f"{what}: {key!r} must be an image array (height, width, channels), "
            f"got {getattr(image, 'shape', type(image).__name__)}"
        )
    return image


def _size(size: int | Sequence[int], what: str) -> tuple[int, int]:
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size, size
    if (
        isinstance(size, Sequence)
        and len(size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        return int(size[0]), int(size[1])
    raise InvalidArgumentError(
        f"{what} size must be a positive int or (height, width), got {size!r}"
    )


def _crop_size(image: np.ndarray, size: tuple[int, int], what: str) -> tuple[int, int]:
    height, width = image.shape[:2]
    if height < size[0] or width < size[1]:
        raise ValueError(
            f"{what}: image of {height}x{width} is smaller than the crop "
            f"{size[0]}x{size[1]}; resize first"
        )
    return height - size[0], width - size[1]


@dataclass(frozen=True)
class DecodeImage:
    """element[key]: encoded bytes -> uint8 (height, width, channels); mode "RGB", "L", "RGBA".

    A Hugging Face Image column's `{"bytes": ..., "path": ...}` dict decodes from its bytes.
    """

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    key: str = "image"
    mode: str = "RGB"

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(element, dict) or self.key not in element:
            raise KeyError(f"DecodeImage: key {self.key!r} is missing from the element")
        value = element[self.key]
        data = encoded_bytes(value, self.key, "DecodeImage")
        if data is None:
            raise TypeError(
                f"DecodeImage: {self.key!r} must be encoded bytes or an Image column's "
                f"{{'bytes', 'path'}} dict, got {type(value).__name__}"
            )
        return {**element, self.key: decode_image(data, self.mode)}


@dataclass(frozen=True)
class Resize:
    """Resizes to (height, width), or with an int the shorter side to `size` (aspect kept)."""

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    size: int | tuple[int, int]
    key: str = "image"
    resample: str = "bilinear"

    def __post_init__(self) -> None:
        _size(self.size, "Resize")
        if self.resample not in _RESAMPLE:
            raise InvalidArgumentError(
                f"Resize resample must be one of {_RESAMPLE}, got {self.resample!r}"
            )

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        image = _image(element, self.key, "Resize")
        if image.dtype != np.uint8:
            raise ValueError(
                f"Resize: {self.key!r} must be uint8 (resize before Normalize), got {image.dtype}"
            )
        height, width = image.shape[:2]
        if isinstance(self.size, int):
            scale = self.size / min(height, width)
            target = (max(1, round(height * scale)), max(1, round(width * scale)))
        else:
            target = _size(self.size, "Resize")
        image_module = load_pillow()
        channels = image.shape[2]
        pil = image_module.fromarray(image[:, :, 0] if channels == 1 else image)
        method = getattr(image_module.Resampling, self.resample.upper())
        out = np.asarray(pil.resize((target[1], target[0]), method))
        return {**element, self.key: out[:, :, None] if out.ndim == 2 else out}


@dataclass(frozen=True)
class CenterCrop:
    """Crops the central (height, width) window."""

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    size: int | tuple[int, int]
    key: str = "image"

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        image = _image(element, self.key, "CenterCrop")
        size = _size(self.size, "CenterCrop")
        dy, dx = _crop_size(image, size, "CenterCrop")
        top, left = dy // 2, dx // 2
        return {**element, self.key: image[top : top + size[0], left : left + size[1]]}


@dataclass(frozen=True)
class RandomCrop:
    """fn(element, rng): crops a (height, width) window at a uniformly random position."""

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    size: int | tuple[int, int]
    key: str = "image"

    def __call__(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        image = _image(element, self.key, "RandomCrop")
        size = _size(self.size, "RandomCrop")
        dy, dx = _crop_size(image, size, "RandomCrop")
        top, left = int(rng.integers(0, dy + 1)), int(rng.integers(0, dx + 1))
        return {**element, self.key: image[top : top + size[0], left : left + size[1]]}


@dataclass(frozen=True)
class RandomFlip:
    """fn(element, rng): mirrors left-right with probability `p`."""

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    key: str = "image"
    p: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise InvalidArgumentError(f"RandomFlip p must be in [0, 1], got {self.p!r}")

    def __call__(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        image = _image(element, self.key, "RandomFlip")
        if rng.random() < self.p:
            image = _mirror(image)
        return {**element, self.key: image}


def _mirror(image: np.ndarray) -> np.ndarray:
    """image[:, ::-1], contiguous. numpy copies such a view one pixel at a time (~3 ms at
    224x224x3, where the later stages would pay it); OpenCV's flip, when installed, ~0.03 ms."""
    cv2 = opencv()
    if cv2 is None or image.dtype not in (np.uint8, np.float32) or image.shape[2] > 4:
        return image[:, ::-1]
    return cv2.flip(image, 1).reshape(image.shape)


@dataclass(frozen=True)
class Normalize:
    """float32 (image * scale - mean) / std, per channel; scale 1/255 maps uint8 to [0, 1]."""

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    mean: float | Sequence[float] = 0.0
    std: float | Sequence[float] = 1.0
    key: str = "image"
    scale: float = 1 / 255

    def __post_init__(self) -> None:
        if np.any(np.asarray(self.std, np.float64) == 0):
            raise InvalidArgumentError(f"Normalize std must be non-zero, got {self.std!r}")

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        return self.into(element, None)

    def into(self, element: dict[str, Any], row: RowFor | None) -> dict[str, Any]:
        """`self(element)`, written straight into the batch's row where `row(key, shape, dtype)`
        gives one (the last stage before a batch stacked as it goes: `ops.map.Map`)."""
        image = _image(element, self.key, "Normalize")
        height, width, channels = image.shape
        std = np.broadcast_to(np.asarray(self.std, np.float32), (channels,))
        mean = np.broadcast_to(np.asarray(self.mean, np.float32), (channels,))
        # image * (scale / std) - mean / std over rows of width * channels: numpy broadcasts a
        # (channels,) vector over the last axis with an inner loop of 3, ~8x slower.
        gain = np.tile(np.float32(self.scale) / std, width)
        offset = np.tile(-mean / std, width)
        # One pass converts and scales into the output (astype, then *=, was two), one adds.
        place = None if row is None else row(self.key, (height, width, channels), np.float32)
        image_out = np.empty((height, width, channels), np.float32) if place is None else place
        out = image_out.reshape(height, width * channels)  # a view: rows are contiguous
        np.multiply(image.reshape(height, width * channels), gain, out=out, dtype=np.float32)
        out += offset
        return {**element, self.key: image_out}
