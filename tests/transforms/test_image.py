"""Image transforms with Pillow: each works alone, in Dataset.map/random_map and in a build."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.rows import ROWS_FROM_BYTES
from tpufeed.transforms import (
    CenterCrop,
    DecodeImage,
    Normalize,
    RandomCrop,
    RandomFlip,
    Resize,
    decode_image,
)


def _encoded(array: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt)
    return buf.getvalue()


def _gradient(height: int = 12, width: int = 16) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([y * 10, x * 10, (x + y) * 5], axis=-1).astype(np.uint8)


def test_decode_png_exactly_and_grayscale_as_one_channel():
    image = _gradient()
    np.testing.assert_array_equal(decode_image(_encoded(image)), image)
    gray = decode_image(_encoded(image), mode="L")
    assert gray.shape == (12, 16, 1)
    out = DecodeImage()({"image": _encoded(image), "label": 3})
    assert out["label"] == 3 and out["image"].shape == (12, 16, 3)


def test_an_image_columns_bytes_and_path_dict_decodes_from_its_bytes():
    """A Hugging Face Image column's cell ({bytes, path}; datasets' own encoding of a PIL image
    is tested in tests/sources/test_huggingface_files.py)."""
    image = _gradient()
    cell = {"bytes": _encoded(image), "path": None}
    np.testing.assert_array_equal(decode_image(cell), image)
    out = DecodeImage(mode="L")({"image": {**cell, "path": "x/0.png"}, "label": 3})
    assert out["label"] == 3 and out["image"].shape == (12, 16, 1)
    with pytest.raises(InvalidArgumentError, match=r"'image' holds no image bytes.*'x/0.png'"):
        DecodeImage()({"image": {"bytes": None, "path": "x/0.png"}})
    with pytest.raises(TypeError, match=r"encoded bytes or an Image column's .*got int"):
        DecodeImage()({"image": 3})
    with pytest.raises(TypeError, match=r"a dict needs 'bytes' and 'path', got \['pixels'\]"):
        decode_image({"pixels": b""})


def test_undecodable_bytes_say_so():
    with pytest.raises(ValueError, match=r"cannot decode image \(9 bytes"):
        decode_image(b"not a png")


def test_resize_exact_and_shorter_side():
    element = {"image": _gradient(12, 16)}
    assert Resize((6, 4))(element)["image"].shape == (6, 4, 3)
    assert Resize(6)(element)["image"].shape == (6, 8, 3)
    assert Resize(6)({"image": _gradient()[:, :, :1]})["image"].shape == (6, 8, 1)
    with pytest.raises(InvalidArgumentError, match="size"):
        Resize((0, 3))
    with pytest.raises(ValueError, match="uint8"):
        Resize(4)({"image": np.zeros((4, 4, 3), np.float32)})


def test_crops_and_flip():
    image = _gradient()
    center = CenterCrop((4, 6))({"image": image})["image"]
    np.testing.assert_array_equal(center, image[4:8, 5:11])
    rng = np.random.default_rng(0)
    crops = {RandomCrop(8)({"image": image}, rng)["image"].tobytes() for _ in range(20)}
    assert len(crops) > 1 and all(len(c) == 8 * 8 * 3 for c in crops)
    a = RandomCrop(8)({"image": image}, np.random.default_rng(5))["image"]
    b = RandomCrop(8)({"image": image}, np.random.default_rng(5))["image"]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(RandomFlip(p=1.0)({"image": image}, rng)["image"], image[:, ::-1])
    np.testing.assert_array_equal(RandomFlip(p=0.0)({"image": image}, rng)["image"], image)
    with pytest.raises(ValueError, match="smaller than the crop"):
        RandomCrop(20)({"image": image}, rng)


def test_normalize():
    image = np.full((2, 2, 3), 255, np.uint8)
    out = Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.25, 1.0))({"image": image})["image"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0], [1.0, 2.0, 0.5])
    with pytest.raises(InvalidArgumentError, match="non-zero"):
        Normalize(std=0)


class _Placed(Normalize):
    """Normalize, counting the elements it wrote straight into their batch row."""

    placed: list = []  # a record of the calls, shared on purpose

    def into(self, element, row):
        def counted(*args):
            place = row(*args)
            _Placed.placed.append(place is not None)
            return place

        return super().into(element, None if row is None else counted)


@pytest.mark.parametrize("workers", [0, 2])
def test_normalize_last_writes_each_image_into_its_batch_row(workers):
    # 4.3 MB float32 images, 13 MB a batch: over ops/rows.py's ROWS_FROM_BYTES, where a batch
    # is stacked row by row as its elements are made (smaller ones are stacked in one call).
    images = [np.random.default_rng(i).integers(0, 256, (600, 600, 3), np.uint8) for i in range(7)]
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 1.0)
    expected = [Normalize(mean, std)({"image": image})["image"] for image in images]
    _Placed.placed.clear()
    ds = tpufeed.Dataset.from_sequence([{"image": im} for im in images]).map(_Placed(mean, std))
    batches = list(ds.batch(3).workers(workers))
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), expected)
    if workers == 0:  # every element after the first of its batch went into its row
        assert 3 * expected[0].nbytes > ROWS_FROM_BYTES
        assert _Placed.placed == [False, True, True] * 2 + [False]


def test_image_pipeline_in_dataset_is_deterministic_per_record():
    records = [{"image": _encoded(_gradient() + i), "label": i} for i in range(8)]
    ds = (
        tpufeed.Dataset.from_sequence(records)
        .shuffle(seed=1)
        .map(DecodeImage())
        .random_map(RandomCrop((8, 8)))
        .random_map(RandomFlip())
        .map(Normalize())
        .batch(4)
    )
    first, again = list(ds), list(ds)
    assert first[0]["image"].shape == (4, 8, 8, 3) and first[0]["image"].dtype == np.float32
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a["image"], b["image"])


def test_a_missing_key_is_named_with_the_record():
    ds = tpufeed.Dataset.from_sequence([{"img": b""}]).map(DecodeImage())
    with pytest.raises(tpufeed.TransformError, match=r"'image' is missing.*record 0"):
        list(ds)


def test_random_image_transforms_in_a_build(tmp_path):
    pytest.importorskip("apache_beam")
    from tpufeed.beam import BuildConfig, build

    (tmp_path / "img").mkdir()
    for i in range(4):
        (tmp_path / "img" / f"{i}.png").write_bytes(_encoded(_gradient() + i))
    (tmp_path / "t.py").write_text(
        "from tpufeed.transforms import DecodeImage, RandomCrop, RandomFlip\n"
        "decode = DecodeImage()\ncrop = RandomCrop((5, 5))\nflip = RandomFlip()\n"
    )
    specs = tuple(f"{tmp_path}/t.py:{name}" for name in ("decode", "crop", "flip"))
    build(
        BuildConfig(inputs=(str(tmp_path / "img"),), output=str(tmp_path / "ds"), transforms=specs)
    )
    source = tpufeed.Dataset.open(tmp_path / "ds").source
    images = [source[i]["image"] for i in range(4)]
    assert all(im.shape == (5, 5, 3) for im in images)
    assert [source[i]["path"] for i in range(4)] == [f"{i}.png" for i in range(4)]
