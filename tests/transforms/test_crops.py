"""The reference crops: the crop distribution, reduced decoding against full decoding within the
documented tolerance (docs/images.md), colour jitter, and the same batches for any worker count."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms import (
    ColorJitter,
    Normalize,
    RandomFlip,
    RandomResizedCrop,
    ResizedCenterCrop,
    decode_image,
    sample_crop_box,
)
from tpufeed.transforms.crops import center_crop_box
from tpufeed.transforms.region import decode_region, image_size, resize_region

stats = pytest.importorskip("scipy.stats")
_CV2 = __import__("importlib").util.find_spec("cv2") is not None
BACKENDS = ["pillow"] + (["opencv"] if _CV2 else [])
BACKENDS += (
    ["turbojpeg"]
    if _CV2 and __import__("tpufeed.transforms.turbojpeg").transforms.turbojpeg.available()
    else []
)
# Documented in docs/images.md: per image, the mean absolute difference (0..255 levels) of a
# reduced-scale decode from a full decode of the same box, measured at most 3.5 (Pillow) and
# 5.6 (OpenCV) on these photographs; the median image at most 1.5 and 2.9. TurboJPEG decodes
# as OpenCV does, a window of the image.
TOLERANCE = {"pillow": (4.5, 2.0), "opencv": (7.0, 3.5), "turbojpeg": (7.0, 3.5)}


def _jpeg(array: np.ndarray, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    """Real photographs: scikit-learn's two samples, whole and as 500x375 crops, quality 90."""
    datasets = pytest.importorskip("sklearn.datasets")
    rng = np.random.default_rng(0)
    out = []
    for name in ("china.jpg", "flower.jpg"):
        image = Image.fromarray(datasets.load_sample_image(name))
        out.append(_jpeg(np.asarray(image)))
        for _ in range(5):
            w = rng.uniform(0.6, 1.0) * 569  # 4:3 inside 640x427
            left, top = rng.uniform(0, 640 - w), rng.uniform(0, 427 - w * 0.75)
            crop = image.resize(
                (500, 375), Image.Resampling.BILINEAR, box=(left, top, left + w, top + w * 0.75)
            )
            out.append(_jpeg(np.asarray(crop)))
    return out


# -- the distribution -------------------------------------------------------------------------


def _boxes(height: int, width: int, n: int, **kwargs) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.array([sample_crop_box(height, width, rng, **kwargs) for _ in range(n)])


def test_crop_area_aspect_and_position_follow_the_reference_distribution():
    """With every first attempt fitting, area is uniform, aspect log-uniform, position uniform."""
    size, n = 1000, 20000
    boxes = _boxes(size, size, n, scale=(0.08, 0.5))
    top, left, h, w = boxes.T
    area = h * w / size**2
    log_aspect = np.log(w / h)
    lo, hi = math.log(3 / 4), math.log(4 / 3)
    assert stats.kstest(area, stats.uniform(0.08, 0.42).cdf).pvalue > 1e-3
    assert stats.kstest(log_aspect, stats.uniform(lo, hi - lo).cdf).pvalue > 1e-3
    assert stats.kstest((top + 0.5) / (size - h + 1), "uniform").pvalue > 1e-3
    assert stats.kstest((left + 0.5) / (size - w + 1), "uniform").pvalue > 1e-3
    # The test tells log-uniform from uniform aspect ratios (what a slip would give).
    assert stats.kstest(w / h, stats.uniform(0.75, 4 / 3 - 0.75).cdf).pvalue < 1e-6


def test_full_scale_crops_are_the_first_fitting_attempt():
    """scale (0.08, 1) on a square: (area a, log aspect u) is uniform on {a <= exp(-|u|)}, so
    the area's density is 2 l for a <= 3/4 and -2 ln(a) above, l = ln(4/3)."""
    size = 1000
    top, left, h, w = _boxes(size, size, 20000).T
    area = h * w / size**2
    ell = math.log(4 / 3)
    a0 = 0.08

    def cdf(a: np.ndarray) -> np.ndarray:
        low = 2 * ell * (np.minimum(a, 0.75) - a0)
        # integral of -2 ln(x) from 3/4 to a: -2 (a ln a - a) + 2 (0.75 ln 0.75 - 0.75)
        high = np.where(a > 0.75, -2 * (a * np.log(a) - a) + 2 * (0.75 * math.log(0.75) - 0.75), 0)
        total = 2 * ell * (0.75 - a0) + (-2 * (0 - 1) + 2 * (0.75 * math.log(0.75) - 0.75))
        return np.clip((low + high) / total, 0, 1)

    assert stats.kstest(area, cdf).pvalue > 1e-3
    assert stats.kstest(area, stats.uniform(0.08, 0.92).cdf).pvalue < 1e-6  # not plain uniform
    assert np.all(top + h <= size) and np.all(left + w <= size) and np.all(area >= 0.079)


def test_no_fitting_attempt_falls_back_to_the_clamped_centre_crop():
    assert sample_crop_box(10, 1000, np.random.default_rng(0)) == (0.0, 493.0, 10.0, 13.0)
    assert sample_crop_box(1000, 10, np.random.default_rng(0)) == (493.0, 0.0, 13.0, 10.0)
    # Narrower than the ratio range: the full width, the height at the lowest ratio.
    assert sample_crop_box(4, 4, np.random.default_rng(0), scale=(1.0, 1.0), ratio=(2.0, 3.0)) == (
        1.0,
        0.0,
        2.0,
        4.0,
    )


def test_the_eval_box_is_the_centre_224_of_256():
    assert center_crop_box(375, 500, (224, 224), 224 / 256) == pytest.approx(
        (23.4375, 85.9375, 328.125, 328.125)
    )
    assert center_crop_box(300, 300, (224, 224), 1.0) == (0.0, 0.0, 300.0, 300.0)


# -- decoding only what is needed -------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduced_decoding_matches_full_decoding_within_the_documented_tolerance(photos, backend):
    worst, middle = TOLERANCE[backend]
    for size in (224, 112, 64, 32):
        errors = []
        for i, data in enumerate(photos):
            full = decode_image(data)
            box = sample_crop_box(*full.shape[:2], np.random.default_rng(i))
            reduced = decode_region(data, box, (size, size), backend=backend)
            whole = resize_region(full, box, (size, size), backend=backend)
            assert reduced.shape == whole.shape == (size, size, 3) and reduced.dtype == np.uint8
            errors.append(np.abs(reduced.astype(int) - whole.astype(int)).mean())
            if box[2] < 2 * size or box[3] < 2 * size:  # no DCT reduction: the same pixels
                np.testing.assert_array_equal(reduced, whole)
        assert max(errors) <= worst and np.median(errors) <= middle, (size, errors)
    # The measure tells a wrong box apart: one shifted by a tenth of its size is far outside.
    full = decode_image(photos[0])
    top, left, h, w = box = (40.0, 60.0, 300.0, 300.0)
    shifted = decode_region(photos[0], (top + 30, left + 30, h, w), (64, 64), backend=backend)
    right = resize_region(full, box, (64, 64), backend=backend)
    assert np.abs(shifted.astype(int) - right.astype(int)).mean() > 3 * worst


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("progressive, subsampling", [(True, 2), (False, 0), (True, 0)])
def test_progressive_and_444_jpegs_decode_within_the_same_tolerance(
    photos, backend, progressive, subsampling
):
    """The W4 image sets' encodings (benchmarks/photos.py): the header walk reads their size
    and reduced decoding holds the documented tolerance, as for baseline 4:2:0."""
    worst, middle = TOLERANCE[backend]
    errors = []
    for i, data in enumerate(photos):
        pixels = decode_image(data)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(
            buf, format="JPEG", quality=90, progressive=progressive, subsampling=subsampling
        )
        encoded = buf.getvalue()
        assert image_size(encoded) == pixels.shape[:2]
        full = decode_image(encoded)
        box = sample_crop_box(*full.shape[:2], np.random.default_rng(i))
        reduced = decode_region(encoded, box, (64, 64), backend=backend)
        whole = resize_region(full, box, (64, 64), backend=backend)
        errors.append(np.abs(reduced.astype(int) - whole.astype(int)).mean())
    assert max(errors) <= worst and np.median(errors) <= middle, errors


@pytest.mark.skipif(len(BACKENDS) < 2, reason="needs opencv-python-headless")
def test_the_two_backends_agree_within_tolerance(photos):
    """OpenCV resamples bilinearly without antialiasing below 2x (as tf.image.resize); Pillow
    antialiases (as torchvision): mean differences up to 4.1 levels measured."""
    errors = []
    for i, data in enumerate(photos):
        box = sample_crop_box(*image_size(data), np.random.default_rng(i))
        a, b = (decode_region(data, box, (224, 224), backend=k) for k in ("pillow", "opencv"))
        errors.append(np.abs(a.astype(int) - b.astype(int)).mean())
    assert max(errors) <= 6 and np.median(errors) <= 2, errors


@pytest.mark.parametrize("backend", BACKENDS)
def test_bytes_and_arrays_give_the_same_crop(backend):
    """PNG (lossless, decoded whole), and the decoded array: one box, one result."""
    y, x = np.mgrid[0:90, 0:120]
    image = np.stack([y * 2, x * 2, (x + y)], axis=-1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    crop = RandomResizedCrop(24, backend=backend)
    from_bytes = crop({"image": buf.getvalue()}, np.random.default_rng(3))["image"]
    from_array = crop({"image": image}, np.random.default_rng(3))["image"]
    np.testing.assert_array_equal(from_bytes, from_array)
    box = sample_crop_box(90, 120, np.random.default_rng(3))
    np.testing.assert_array_equal(from_array, resize_region(image, box, (24, 24), backend))
    evaluated = ResizedCenterCrop(24, backend=backend)({"image": buf.getvalue(), "label": 1})
    assert evaluated["label"] == 1 and evaluated["image"].shape == (24, 24, 3)
    cell = {"bytes": buf.getvalue(), "path": "0.png"}  # a Hugging Face Image column's
    np.testing.assert_array_equal(
        crop({"image": cell}, np.random.default_rng(3))["image"], from_bytes
    )
    with pytest.raises(InvalidArgumentError, match="holds no image bytes, only a path"):
        crop({"image": {"bytes": None, "path": "0.png"}}, np.random.default_rng(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_grey_cmyk_and_exif_rotated_jpegs(photos, backend):
    rgb = decode_image(photos[1])
    grey = Image.fromarray(rgb).convert("L")
    buf = io.BytesIO()
    grey.save(buf, format="JPEG", quality=90)
    out = RandomResizedCrop(32, mode="L", backend=backend)(
        {"image": buf.getvalue()}, np.random.default_rng(0)
    )["image"]
    assert out.shape == (32, 32, 1)
    cmyk = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(cmyk, format="JPEG", quality=95)
    box = (0.0, 0.0, 375.0, 500.0)
    from_cmyk = decode_region(cmyk.getvalue(), box, (32, 32), backend=backend).astype(int)
    assert np.abs(from_cmyk - decode_region(photos[1], box, (32, 32), backend=backend)).mean() < 8
    # EXIF orientation 6 (rotate on display): ignored, like Pillow and the header size.
    rotated = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(rotated, format="JPEG", quality=90, exif=exif)
    assert image_size(rotated.getvalue()) == (375, 500)
    assert decode_region(rotated.getvalue(), box, (375, 500), backend=backend).shape == (
        375,
        500,
        3,
    )


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"cannot read image header \(7 bytes"):
        RandomResizedCrop(8)({"image": b"garbage"}, np.random.default_rng(0))
    with pytest.raises(ValueError, match="cannot decode image"):
        decode_region(b"\xff\xd8\xff" + b"\0" * 50, (0, 0, 4, 4), (2, 2), backend="pillow")
    with pytest.raises(ValueError, match="not inside"):
        resize_region(np.zeros((4, 4, 3), np.uint8), (0, 0, 5, 4), (2, 2))
    with pytest.raises(ValueError, match="uint8 or encoded bytes"):
        RandomResizedCrop(8)({"image": np.zeros((9, 9, 3), np.float32)}, np.random.default_rng(0))
    with pytest.raises(KeyError, match="'image' is missing"):
        ResizedCenterCrop(8)({"img": b""})
    for bad in (
        dict(scale=(0.5, 0.1)),
        dict(scale=(0.1, 2.0)),
        dict(ratio=(0, 1)),
        dict(backend="simd"),
        dict(size=0),
    ):
        with pytest.raises(InvalidArgumentError):
            RandomResizedCrop(**{"size": 8, **bad})
    with pytest.raises(InvalidArgumentError, match="crop_fraction"):
        ResizedCenterCrop(8, crop_fraction=1.5)
    records = [{"image": b"not an image"}]
    with pytest.raises(tpufeed.TransformError, match=r"record 0"):
        list(tpufeed.Dataset.from_sequence(records).random_map(RandomResizedCrop(8)))


# -- colour jitter -----------------------------------------------------------------------------


def test_color_jitter_ranges_and_identities(photos):
    image = RandomResizedCrop(32)({"image": photos[0]}, np.random.default_rng(0))["image"]
    element = {"image": image, "label": 2}
    assert ColorJitter()(element, np.random.default_rng(0)) is element
    grey = np.repeat(image[:, :, :1], 3, axis=2)
    np.testing.assert_array_equal(
        ColorJitter(saturation=0.9)({"image": grey}, np.random.default_rng(1))["image"], grey
    )
    mid = (image // 2 + 40).astype(np.uint8)  # below 255 / 1.4: no clipping
    means = [
        ColorJitter(brightness=0.4)({"image": mid}, np.random.default_rng(s))["image"].mean()
        for s in range(200)
    ]
    ratio = np.array(means) / mid.mean()
    assert 0.55 < ratio.min() < 0.7 and 1.25 < ratio.max() < 1.45  # factors in [0.6, 1.4]
    a = ColorJitter(0.4, 0.4, 0.4)(element, np.random.default_rng(5))
    b = ColorJitter(0.4, 0.4, 0.4)(element, np.random.default_rng(5))
    np.testing.assert_array_equal(a["image"], b["image"])
    assert a["label"] == 2 and a["image"].dtype == np.uint8
    spread = [
        ColorJitter(contrast=1.0)(element, np.random.default_rng(s))["image"].std()
        for s in range(100)
    ]
    assert min(spread) < 0.2 * image.std() and max(spread) > 1.4 * image.std()  # factors [0, 2]
    with pytest.raises(InvalidArgumentError, match="brightness"):
        ColorJitter(brightness=-1)
    with pytest.raises(ValueError, match="uint8"):
        ColorJitter(0.1)({"image": image.astype(np.float32)}, np.random.default_rng(0))


# -- in a pipeline -----------------------------------------------------------------------------


def _pipeline(photos: list[bytes], workers: int) -> list[dict]:
    records = [{"image": photos[i % len(photos)], "label": i} for i in range(24)]
    ds = (
        tpufeed.Dataset.from_sequence(records)
        .shuffle(seed=3)
        .random_map(RandomResizedCrop(48))
        .random_map(RandomFlip())
        .random_map(ColorJitter(0.4, 0.4, 0.4))
        .map(Normalize(mean=0.5, std=0.25))
        .batch(8)
        .workers(workers)
    )
    return list(ds)


@pytest.mark.multiprocess
def test_the_same_batches_with_0_and_2_workers(photos):
    plain, parallel = _pipeline(photos, 0), _pipeline(photos, 2)
    assert len(plain) == len(parallel) == 3
    assert plain[0]["image"].shape == (8, 48, 48, 3) and plain[0]["image"].dtype == np.float32
    for a, b in zip(plain, parallel):
        np.testing.assert_array_equal(a["label"], b["label"])
        np.testing.assert_array_equal(a["image"], b["image"])


def test_the_jpeg_header_walk_agrees_with_pillow(photos):
    """Baseline, progressive, 4:4:4 and EXIF-carrying JPEGs; a truncated one falls to Pillow."""
    rgb = decode_image(photos[0])
    variants = list(photos)
    for options in (
        dict(progressive=True),
        dict(quality=50, subsampling=0),
        dict(exif=Image.Exif()),
    ):
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="JPEG", **options)
        variants.append(buf.getvalue())
    for data in variants:
        assert image_size(data) == Image.open(io.BytesIO(data)).size[::-1]
    with pytest.raises(ValueError, match="cannot read image header"):
        image_size(variants[0][:20])


def _jpeg_with_segment(segment: bytes) -> bytes:
    """A real JPEG with `segment` (marker, length, payload) put right after its SOI."""
    buf = io.BytesIO()
    Image.fromarray(np.full((24, 32, 3), 90, np.uint8)).save(buf, format="JPEG")
    data = buf.getvalue()
    return data[:2] + segment + data[2:]


@pytest.mark.timeout(60)  # a walk that stood still would loop forever
@pytest.mark.parametrize(
    "segment",
    [
        b"\xff\xe1\x00\x00",  # a length of 0: counts not even its own two bytes
        b"\xff\xe1\x00\x01",  # 1: the same
        b"\xff\xe1\xff\xff" + b"x" * 10,  # 65535 bytes said, the file ends first
        b"\xff\xda\x00\x08" + b"\x00" * 6,  # scan data before any frame header
    ],
    ids=["zero", "one", "past-the-end", "scan-first"],
)
def test_the_jpeg_header_walk_stops_on_bad_lengths_and_the_decoder_decides(segment):
    """The header walk never stands still or reads past the end: it gives up, and Pillow
    (which parses every marker) reads the size or raises the ValueError a transform raises."""
    from tpufeed.transforms.region import _jpeg_size

    data = _jpeg_with_segment(segment)
    assert _jpeg_size(data) is None
    try:
        size = image_size(data)
    except ValueError as e:
        assert "cannot read image header" in str(e)
    else:
        assert size == (24, 32)
