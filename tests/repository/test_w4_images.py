"""W4 (benchmarks/vision.py): its image sets (benchmarks/photos.py) are what their table says,
its decoder candidates (benchmarks/decoders.py) give the reference's crop, and its tf.data
variants and tpufeed rows run, at a tiny size (the numbers mean nothing here)."""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
JpegImagePlugin = pytest.importorskip("PIL.JpegImagePlugin")

from benchmarks.photos import IMAGE_SETS, make_images  # noqa: E402


@pytest.mark.parametrize("image_set", sorted(IMAGE_SETS))
def test_every_image_set_has_its_size_and_encoding(image_set):
    (width, height), _, grain, progressive, subsampling = IMAGE_SETS[image_set]
    images = make_images(8, image_set)
    assert len({data for data, _ in images}) == 8  # distinct records
    sizes = set()
    for data, label in images:
        with Image.open(io.BytesIO(data)) as image:
            sizes.add(image.size)
            assert image.format == "JPEG" and image.mode == "RGB"
            assert bool(image.info.get("progressive")) == progressive
            assert JpegImagePlugin.get_sampling(image) == subsampling
        assert label in (0, 1, 2)
    assert sizes <= {(width, height), (height, width)}
    assert (width, height) in sizes  # 3 in 4 landscape: 8 images hold one


def test_the_same_pixels_in_every_500x375_encoding():
    """imagenet, progressive, 444 and progressive-444 differ only in how they are saved."""
    decoded = {
        name: [np.asarray(Image.open(io.BytesIO(d)), np.int16) for d, _ in make_images(4, name)]
        for name in ("imagenet", "progressive", "444", "progressive-444")
    }
    for name in ("progressive", "444", "progressive-444"):
        for a, b in zip(decoded["imagenet"], decoded[name]):
            assert a.shape == b.shape and np.abs(a - b).mean() < 2.5, name
    # grain makes them busier than the legacy, smooth set: more bytes at the same quality
    legacy = np.mean([len(d) for d, _ in make_images(8, "legacy")])
    assert np.mean([len(d) for d, _ in make_images(8, "imagenet")]) > 1.4 * legacy


def test_the_decoder_candidates_give_the_reference_crop():
    pytest.importorskip("cv2")
    from benchmarks.decoders import SIZE, candidates
    from tpufeed.transforms import sample_crop_box
    from tpufeed.transforms.region import image_size

    found = candidates()
    reference = next(iter(found.values()))
    for i, (data, _) in enumerate(make_images(6, "imagenet")):
        box = sample_crop_box(*image_size(data), np.random.default_rng(i))
        expected = reference(data, box).astype(np.int16)
        for name, fn in found.items():
            out = fn(data, box)
            assert out.shape == (SIZE, SIZE, 3) and out.dtype == np.uint8, name
            # The same libjpeg-turbo IDCT and resample: within Pillow's antialiasing (~2 levels).
            assert np.abs(out - expected).mean() < 6, name


@pytest.mark.slow
@pytest.mark.parametrize("row", ["tpufeed", "tfdata-nondet", "tfdata-private"])
def test_the_rows_run_on_a_tiny_image_set(tmp_path, row):
    if row.startswith("tfdata"):
        pytest.importorskip("tensorflow")
    from benchmarks.vision import measure, prepare, targets

    files = prepare(str(tmp_path), 64, "progressive-444")
    assert files["encoding"] == "500x375 progressive 4:4:4 q90, grain"
    result = measure(row, files, passes=1, workers=1)
    assert len(result["images_per_s"]) == 1 and result["cpu_s_per_image"] > 0
    rows = [
        {
            "key": "tfdata-nondet",
            "row": "tfdata-nondet",
            "images_per_s": 100.0,
            "cpu_ms_per_image": 2.0,
            "per_core": 50.0,
            "first_batch_s": 1.0,
        },
        {
            "key": "tpufeed-workers",
            "row": "tpufeed 2 workers",
            "images_per_s": 130.0,
            "cpu_ms_per_image": 2.0,
            "per_core": 65.0,
            "first_batch_s": 0.4,
        },
    ]
    checks = {name.split(" (")[0]: (value, met) for name, value, met in targets(rows, 1000)}
    assert checks["tpufeed N workers >= 1.2x tf.data's strongest"] == (1.3, True)
    assert checks["tpufeed N workers first batch <= 0.5 s"] == (0.4, True)
