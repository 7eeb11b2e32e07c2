"""Colour jitter: random brightness, contrast and saturation, in a random order, on uint8 images.

The operations and their ranges are torchvision's ColorJitter (Pillow's ImageEnhance): each
factor is uniform in [max(0, 1 - x), 1 + x]; brightness scales the image, contrast blends it
with its mean grey level, saturation with its own greyscale. Hue is not offered (an HSV round
trip per image costs more than the crop). A pure function of (element, rng).

>>> ds = ds.random_map(ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms.image import _image

__all__ = ["ColorJitter"]

_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R 601-2, as Pillow's convert("L")


def _grey(image: np.ndarray) -> np.ndarray:
    if image.shape[2] == 1:
        return image[:, :, 0]
    return image[:, :, :3] @ _LUMA


def _brightness(image: np.ndarray, factor: float) -> np.ndarray:
    return image * np.float32(factor)


def _contrast(image: np.ndarray, factor: float) -> np.ndarray:
    mean = np.float32(_grey(image).mean())
    return image * np.float32(factor) + mean * np.float32(1 - factor)


def _saturation(image: np.ndarray, factor: float) -> np.ndarray:
    if image.shape[2] == 1:
        return image
    grey = _grey(image)[:, :, None]
    return image * np.float32(factor) + grey * np.float32(1 - factor)


@dataclass(frozen=True)
class ColorJitter:
    """fn(element, rng): brightness, contrast and saturation jitter, in a random order."""

    thread_safe: ClassVar[bool] = True  # no state: may run on several threads at once

    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0
    key: str = "image"

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(
                    f"ColorJitter {name} must be a number >= 0, got {value!r}"
                )

    def __call__(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        image = _image(element, self.key, "ColorJitter")
        if image.dtype != np.uint8:
            raise ValueError(
                f"ColorJitter: {self.key!r} must be uint8 (jitter before "
                f"Normalize), got {image.dtype}"
            )
        ops = [
            (op, amount)
            for op, amount in (
                (_brightness, self.brightness),
                (_contrast, self.contrast),
                (_saturation, self.saturation),
            )
            if amount > 0
        ]
        if not ops:
            return element
        factors = [rng.uniform(max(0.0, 1 - amount), 1 + amount) for _, amount in ops]
        work = image.astype(np.float32)
        for i in rng.permutation(len(ops)):
            # Each step clips, as Pillow's enhancers do between operations.
            work = np.clip(ops[i][0](work, factors[i]), 0, 255)
        return {**element, self.key: np.rint(work).astype(np.uint8)}
