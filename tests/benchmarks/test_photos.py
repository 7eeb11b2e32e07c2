"""W4's image sets (benchmarks/photos.py) are what their table says, and W4's decoder
candidates (benchmarks/decoders.py) give the reference's crop."""

from __future__ import annotations

import io

import numpy as np
import pytest

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
