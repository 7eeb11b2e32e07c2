"""W4's recipe, the same for every row (benchmarks/vision.py, vision_spdl.py): the sizes, the
ImageNet mean and std, torchvision's random-resized-crop box, and the per-image work of the PIL
rows (what a careful user writes)."""

from __future__ import annotations

import io
import math
import random
from typing import Any

import numpy as np

SIZE, BATCH, SEED = 224, 64, 0
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def pil_crop_box(width: int, height: int, rnd: random.Random) -> tuple[int, int, int, int]:
    """(left, top, w, h) of a random-resized-crop box, as torchvision's RandomResizedCrop
    draws it: 10 attempts at an area and an aspect in range, then the centre."""
    area = width * height
    for _ in range(10):
        target = area * rnd.uniform(*SCALE)
        aspect = math.exp(rnd.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rnd.randint(0, width - w), rnd.randint(0, height - h), w, h
    in_ratio = width / height
    if in_ratio < RATIO[0]:
        w, h = width, int(round(width / RATIO[0]))
    elif in_ratio > RATIO[1]:
        w, h = int(round(height * RATIO[1])), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def pil_work(record: dict, rnd: random.Random) -> dict[str, Any]:
    """One record through PIL: decode, crop+resize (antialiased bilinear), mirror, normalise."""
    from PIL import Image

    with Image.open(io.BytesIO(record["image"])) as image:
        image = image.convert("RGB")
        left, top, w, h = pil_crop_box(*image.size, rnd)
        image = image.resize(
            (SIZE, SIZE), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
    array = np.asarray(image, np.float32)
    if rnd.random() < 0.5:
        array = array[:, ::-1]
    return {"image": (array * np.float32(1 / 255) - MEAN) / STD, "label": record["label"]}
