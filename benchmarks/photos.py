"""W4's image sets: JPEGs cut from the photographs that ship with installed packages.

The sources are scikit-learn's china.jpg and flower.jpg (640x427) and matplotlib's
grace_hopper.jpg (512x600): the only photographs available offline here (scipy.datasets and
most of scikit-image's data download on first use). Every record is a distinct crop of one of
them (random position, 3 in 4 landscape), randomly mirrored, saved by Pillow at quality 90.

| set | pixels | encoding | how the pixels are made |
|---|---|---|---|
| legacy | 500x375 | baseline, 4:2:0 | 55-100% of the largest 4:3 window, upscaled (~47 KB: smooth) |
| imagenet | 500x375 | baseline, 4:2:0 | 80-100% of the window: at most a mild downscale, then grain |
| progressive | 500x375 | progressive, 4:2:0 | the same pixels as imagenet |
| 444 | 500x375 | baseline, 4:4:4 | the same pixels as imagenet |
| progressive-444 | 500x375 | progressive, 4:4:4 | the same pixels as imagenet |
| large | 1500x1000 | baseline, 4:2:0 | 80-100% of the 3:2 window upscaled ~2.5x, then grain |

"Grain" is Gaussian luminance noise of sigma 10 levels, one value per pixel for all three
channels: a stand-in for the sensor noise and fine texture of camera photographs, which these
small, already-compressed sources have lost. It brings a 500x375 crop from ~55 KB to ~85 KB
(ImageNet's training JPEGs average ~110 KB at ~400x350, most baseline 4:2:0). The `legacy` set
is what W4 used up to session 14 (kept so that old figures can be reproduced).
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

SEED = 0
QUALITY = 90
GRAIN = 10.0
# set -> (landscape (width, height), share of the largest window, grain, progressive, subsampling)
IMAGE_SETS: dict[str, tuple[tuple[int, int], tuple[float, float], float, bool, int]] = {
    "legacy": ((500, 375), (0.55, 1.0), 0.0, False, 2),
    "imagenet": ((500, 375), (0.8, 1.0), GRAIN, False, 2),
    "progressive": ((500, 375), (0.8, 1.0), GRAIN, True, 2),
    "444": ((500, 375), (0.8, 1.0), GRAIN, False, 0),
    "progressive-444": ((500, 375), (0.8, 1.0), GRAIN, True, 0),
    "large": ((1500, 1000), (0.8, 1.0), GRAIN, False, 2),
}


def source_photographs() -> list[str]:
    """JPEG photographs that ship with scikit-learn and matplotlib."""
    import matplotlib
    import sklearn

    paths = [
        os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images", name)
        for name in ("china.jpg", "flower.jpg")
    ]
    paths.append(
        os.path.join(
            os.path.dirname(matplotlib.__file__), "mpl-data", "sample_data", "grace_hopper.jpg"
        )
    )
    return paths


def describe(image_set: str) -> str:
    (width, height), _, grain, progressive, subsampling = IMAGE_SETS[image_set]
    kind = "progressive" if progressive else "baseline"
    chroma = "4:4:4" if subsampling == 0 else "4:2:0"
    return f"{width}x{height} {kind} {chroma} q{QUALITY}" + (", grain" if grain else "")


def make_images(n: int, image_set: str = "imagenet", seed: int = SEED) -> list[tuple[bytes, int]]:
    """`n` distinct (JPEG bytes, label) of `image_set` (see the module docstring)."""
    from PIL import Image

    (width_out, height_out), share, grain, progressive, subsampling = IMAGE_SETS[image_set]
    photos = [Image.open(p).convert("RGB") for p in source_photographs()]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        label = i % len(photos)
        photo = photos[label]
        width, height = photo.size
        tall = rng.random() < 0.25
        size = (height_out, width_out) if tall else (width_out, height_out)
        aspect = size[0] / size[1]
        w = rng.uniform(*share) * min(width, height * aspect)
        h = w / aspect
        left, top = rng.uniform(0, width - w), rng.uniform(0, height - h)
        image = photo.resize(size, Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if grain:
            image = Image.fromarray(_grain(np.asarray(image), grain, rng))
        buf = io.BytesIO()
        image.save(
            buf, format="JPEG", quality=QUALITY, progressive=progressive, subsampling=subsampling
        )
        out.append((buf.getvalue(), label))
    return out


def _grain(pixels: np.ndarray, sigma: float, rng: np.random.Generator) -> Any:
    noise = rng.normal(0.0, sigma, pixels.shape[:2]).astype(np.float32)[..., None]
    return np.clip(pixels + noise, 0, 255).astype(np.uint8)
