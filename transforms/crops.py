"""The ImageNet reference crops: RandomResizedCrop (training) and ResizedCenterCrop (evaluation).

Both pick their box on the full-size image, then decode only what the box needs when the
element holds encoded bytes (`tpufeed.transforms.region`), or crop and resample an array.
The box is a pure function of (image size, rng), so a record gets the same crop whichever
worker runs it and whichever decoder is installed.

>>> ds = (tpufeed.Dataset.open("imagenet-shards").shuffle(seed=0)  # doctest: +SKIP
...       .random_map(RandomResizedCrop(224)).random_map(RandomFlip())
...       .map(Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms.image import _image, _size, encoded_bytes
from tpufeed.transforms.region import (
    BACKENDS,
    Box,
    decode_region,
    image_size,
    resize_region,
    resolve_backend,
)

__all__ = ["RandomResizedCrop", "ResizedCenterCrop", "center_crop_box", "sample_crop_box"]


def sample_crop_box(
    height: int,
    width: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    attempts: int = 10,
) -> Box:
    """(top, left, height, width) of a random crop, torchvision's RandomResizedCrop.get_params.

    Up to `attempts` tries: area uniform in `scale` x the image's area, aspect ratio (w / h)
    log-uniform in `ratio`, sides rounded; the first that fits is placed uniformly. If none
    fits, the largest centred crop whose aspect ratio is clamped into `ratio`.
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(attempts):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return float(top), float(left), float(h), float(w)
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        h, w = height, width
    return float((height - h) // 2), float((width - w) // 2), float(h), float(w)


def center_crop_box(height: int, width: int, size: tuple[int, int], crop_fraction: float) -> Box:
    """The centred box that Resize(shorter side = size / crop_fraction) + CenterCrop(size) keeps.

    In full-size coordinates and fractional: the evaluation crop at 224 / 256 keeps the central
    0.875 of the shorter side (scaled for a non-square `size`).
    """
    scale = min(height, width) * crop_fraction / min(size)
    h, w = min(height, size[0] * scale), min(width, size[1] * scale)
    return (height - h) / 2, (width - w) / 2, h, w


def _check_range(name: str, value: Any, low: float) -> tuple[float, float]:
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        or not low < value[0] <= value[1]
    ):
        raise InvalidArgumentError(
            f"RandomResizedCrop {name} must be (low, high) with {low} < low <= high, got {value!r}"
        )
    return float(value[0]), float(value[1])


def _crop(
    element: Any, key: str, what: str, box_of: Any, size: tuple[int, int], mode: str, backend: str
) -> dict[str, Any]:
    """element[key] (encoded bytes, an Image column's {bytes, path} dict, or a uint8 array) ->
    the box `box_of(height, width)`, resized."""
    if not isinstance(element, dict):
        raise TypeError(f"{what} needs a dict element, got {type(element).__name__}")
    if key not in element:
        raise KeyError(f"{what}: key {key!r} is missing (the element has {sorted(element)})")
    data = encoded_bytes(element[key], key, what)
    if data is not None:
        height, width = image_size(data)
        out = decode_region(data, box_of(height, width), size, mode, backend)
    else:
        image = _image(element, key, what)
        if image.dtype != np.uint8:
            raise ValueError(f"{what}: {key!r} must be uint8 or encoded bytes, got {image.dtype}")
        out = resize_region(image, box_of(*image.shape[:2]), size, backend)
    return {**element, key: out}


@dataclass(frozen=True)
class RandomResizedCrop:
    """fn(element, rng): a random box of random area and aspect ratio, resized to `size`.

    The ImageNet training crop (torchvision's RandomResizedCrop, the TPU ResNet reference):
    see `sample_crop_box`. element[key] may be encoded bytes (only the box is decoded, at
    reduced JPEG scale when it is large) or a uint8 array; `mode` applies to bytes.
    """

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    key: str = "image"
    mode: str = "RGB"
    backend: str = "auto"

    def __post_init__(self) -> None:
        _size(self.size, "RandomResizedCrop")
        low, high = _check_range("scale", self.scale, 0.0)
        if high > 1.0:
            raise InvalidArgumentError(
                f"RandomResizedCrop scale must be within (0, 1], got {self.scale!r}"
            )
        _check_range("ratio", self.ratio, 0.0)
        if self.backend not in BACKENDS:
            raise InvalidArgumentError(
                f"RandomResizedCrop backend must be one of {BACKENDS}, got {self.backend!r}"
            )

    def __call__(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        size = _size(self.size, "RandomResizedCrop")
        scale, ratio = tuple(map(float, self.scale)), tuple(map(float, self.ratio))
        return _crop(
            element,
            self.key,
            "RandomResizedCrop",
            lambda h, w: sample_crop_box(h, w, rng, scale, ratio),  # type: ignore[arg-type]
            size,
            self.mode,
            resolve_backend(self.backend),
        )


@dataclass(frozen=True)
class ResizedCenterCrop:
    """fn(element): the evaluation crop, Resize(size / crop_fraction) then CenterCrop(size).

    Done as one step (the central box, then a resize to `size`), so a JPEG decodes at reduced
    scale; the default 0.875 is the standard 224 / 256.
    """

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    size: int | tuple[int, int]
    crop_fraction: float = 224 / 256
    key: str = "image"
    mode: str = "RGB"
    backend: str = "auto"

    def __post_init__(self) -> None:
        _size(self.size, "ResizedCenterCrop")
        if not (isinstance(self.crop_fraction, (int, float)) and 0 < self.crop_fraction <= 1):
            raise InvalidArgumentError(
                f"ResizedCenterCrop crop_fraction must be in (0, 1], got {self.crop_fraction!r}"
            )
        if self.backend not in BACKENDS:
            raise InvalidArgumentError(
                f"ResizedCenterCrop backend must be one of {BACKENDS}, got {self.backend!r}"
            )

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        size = _size(self.size, "ResizedCenterCrop")
        return _crop(
            element,
            self.key,
            "ResizedCenterCrop",
            lambda h, w: center_crop_box(h, w, size, float(self.crop_fraction)),
            size,
            self.mode,
            resolve_backend(self.backend),
        )
