"""The TurboJPEG backend: libjpeg-turbo 3 at the crop's DCT scale, only the crop's window where a
libturbojpeg 3 is found ("window"), else simplejpeg's whole image ("simplejpeg"); the same crops
as the OpenCV backend, the same errors, any thread, any worker count."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

pytest.importorskip("cv2")
from PIL import Image

import tpufeed
from tests.transforms.test_crops import TOLERANCE, photos  # noqa: F401 - the fixture
from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms import RandomResizedCrop, ResizedCenterCrop, sample_crop_box, turbojpeg
from tpufeed.transforms.region import decode_region, resize_region, resolve_backend

pytestmark = pytest.mark.skipif(
    not turbojpeg.available(), reason="no libjpeg-turbo 3: pip install tpufeed[turbojpeg]"
)


@pytest.fixture(params=["window", "simplejpeg"])
def source(request, monkeypatch):
    """Where libjpeg-turbo 3 comes from: a libturbojpeg 3 (the window), or simplejpeg."""
    if request.param == "window" and turbojpeg.library() is None:
        pytest.skip(f"no libturbojpeg 3 here: its path in {turbojpeg.ENV}")
    if request.param == "simplejpeg":
        if turbojpeg.simplejpeg() is None:
            pytest.skip("no simplejpeg: pip install tpufeed[turbojpeg]")
        monkeypatch.setattr(turbojpeg, "library", lambda: None)
    return request.param


def _boxes(data: bytes, n: int, seed: int = 0) -> list[tuple[float, float, float, float]]:
    height, width = Image.open(io.BytesIO(data)).size[::-1]
    rng = np.random.default_rng(seed)
    return [sample_crop_box(height, width, rng) for _ in range(n)]


def _differences(photos, size, backends=("turbojpeg", "opencv"), **encode) -> list[float]:  # noqa: F811
    """The mean absolute difference of each crop between two backends, over every photo."""
    out = []
    for data in photos:
        if encode:
            buf = io.BytesIO()
            Image.open(io.BytesIO(data)).save(buf, format="JPEG", quality=90, **encode)
            data = buf.getvalue()
        for box in _boxes(data, 6):
            a, b = (decode_region(data, box, (size, size), backend=k) for k in backends)
            out.append(float(np.abs(a.astype(int) - b.astype(int)).mean()))
    return out


def test_auto_takes_it_where_it_is_installed(source):
    assert resolve_backend("auto") == resolve_backend("turbojpeg") == "turbojpeg"


def test_at_full_scale_the_crops_are_opencvs_exactly(photos, source):  # noqa: F811
    """At 224 no box of these photographs is reduced: a window's pixels are the whole
    image's, so the crops are identical."""
    assert max(_differences(photos, 224)) == 0


@pytest.mark.parametrize(
    "encode",
    [{}, {"progressive": True}, {"subsampling": 0}, {"subsampling": 1}],
    ids=["420", "progressive", "444", "422"],
)
def test_reduced_scales_stay_within_the_documented_tolerance(photos, encode, source):  # noqa: F811
    worst, middle = TOLERANCE["turbojpeg"]
    for size in (112, 64, 32):
        differences = _differences(photos, size, ("turbojpeg", "pillow"), **encode)
        assert max(differences) <= worst and float(np.median(differences)) <= middle, size
        same_scale = _differences(photos, size, **encode)  # against OpenCV's reduced decode
        assert float(np.median(same_scale)) <= 0.5 and max(same_scale) <= worst, size


def test_grey_output_and_cmyk_input(photos, source):  # noqa: F811
    box = _boxes(photos[1], 1)[0]
    grey = decode_region(photos[1], box, (40, 40), mode="L", backend="turbojpeg")
    assert grey.shape == (40, 40, 1)
    opencvs = decode_region(photos[1], box, (40, 40), mode="L", backend="opencv")
    assert np.abs(grey.astype(int) - opencvs.astype(int)).mean() < 0.5  # a level here and there
    cmyk = io.BytesIO()
    Image.open(io.BytesIO(photos[1])).convert("CMYK").save(cmyk, format="JPEG", quality=95)
    from_cmyk = decode_region(cmyk.getvalue(), box, (32, 32), backend="turbojpeg")  # OpenCV's
    np.testing.assert_array_equal(
        from_cmyk, decode_region(cmyk.getvalue(), box, (32, 32), backend="opencv")
    )


def test_bad_jpegs_are_named_and_a_damaged_one_fails_as_with_opencv(photos, source):  # noqa: F811
    with pytest.raises(ValueError, match=r"cannot decode image \(53 bytes"):
        decode_region(b"\xff\xd8\xff" + b"\0" * 50, (0, 0, 4, 4), (2, 2), backend="turbojpeg")
    with pytest.raises(ValueError, match="not inside"):
        decode_region(photos[1], (0, 0, 400, 600), (2, 2), backend="turbojpeg")
    bogus = bytearray(photos[1])
    bogus[bogus.index(b"\xff\xc4") + 4] = 0x55  # a Huffman table's class and index
    # simplejpeg's header call (TurboJPEG 2's) says only that it cannot read the subsampling
    said = {"window": "TurboJPEG: Bogus DHT index", "simplejpeg": "libjpeg-turbo: "}[source]
    with pytest.raises(ValueError, match=rf"cannot decode image \(\d+ bytes, .*{said}"):
        decode_region(bytes(bogus), (0, 0, 40, 40), (20, 20), backend="turbojpeg")
    cut = photos[1][: len(photos[1]) // 2]  # libjpeg-turbo warns: OpenCV decides, as ever
    got = []
    for backend in ("turbojpeg", "opencv"):  # OpenCV 5 refuses it; 4.10 decodes the top half
        try:
            got.append(decode_region(cut, (0.0, 0.0, 300.0, 400.0), (64, 64), backend=backend))
        except ValueError as error:
            got.append(str(error))
    assert type(got[0]) is type(got[1]) and np.array_equal(got[0], got[1]), got
    box = (10.0, 20.0, 200.0, 300.0)  # and the next image decodes as ever
    good = (decode_region(photos[2], box, (64, 64), backend=k) for k in ("turbojpeg", "opencv"))
    np.testing.assert_array_equal(*good)


def test_threads_decode_at_once_and_get_the_same_crops(photos, source):  # noqa: F811
    jobs = [(data, box) for data in photos for box in _boxes(data, 4)]
    alone = [decode_region(d, b, (96, 96), backend="turbojpeg") for d, b in jobs]
    together: list = [None] * len(jobs)

    def run(start: int) -> None:
        for i in range(start, len(jobs), 3):
            together[i] = decode_region(*jobs[i], (96, 96), backend="turbojpeg")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


@pytest.mark.multiprocess
def test_the_same_batches_with_0_and_2_workers(photos):  # noqa: F811
    def batches(workers: int) -> list:
        ds = (
            tpufeed.Dataset.from_sequence([{"image": p} for p in photos])
            .shuffle(2)
            .random_map(RandomResizedCrop(64, backend="turbojpeg"))
            .map(ResizedCenterCrop(48, backend="turbojpeg"))
            .batch(4)
            .workers(workers)
        )
        return [b["image"] for b in ds]

    for a, b in zip(batches(0), batches(2), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_window_library_is_looked_for_in_tpufeed_libturbojpeg_first(monkeypatch, tmp_path):
    if turbojpeg.library() is None:
        pytest.skip(f"no libturbojpeg 3 here: its path in {turbojpeg.ENV}")
    path = turbojpeg.library()._name
    monkeypatch.setenv(turbojpeg.ENV, path)
    assert turbojpeg._candidates()[0] == path
    assert turbojpeg._load(str(tmp_path / "missing.so")) is None
    monkeypatch.setenv(turbojpeg.ENV, str(tmp_path / "missing.so"))
    turbojpeg.library.cache_clear()
    try:
        with pytest.raises(InvalidArgumentError, match=r"TPUFEED_LIBTURBOJPEG=.*missing.so"):
            turbojpeg.library()
    finally:
        monkeypatch.setenv(turbojpeg.ENV, path)
        turbojpeg.library.cache_clear()
        assert turbojpeg.library()._name == path


def test_without_libjpeg_turbo_3_it_says_what_to_install_and_auto_takes_opencv(monkeypatch):
    monkeypatch.setattr(turbojpeg, "library", lambda: None)
    monkeypatch.setattr(turbojpeg, "simplejpeg", lambda: None)
    with pytest.raises(InvalidArgumentError, match=r"tpufeed\[turbojpeg\].*TPUFEED_LIBTURBOJPEG"):
        resolve_backend("turbojpeg")
    assert resolve_backend("auto") == "opencv"
    crop = RandomResizedCrop(8, backend="auto")({"image": _tiny()}, np.random.default_rng(0))
    assert crop["image"].shape == (8, 8, 3)
    image = np.zeros((9, 9, 3), np.uint8)
    assert resize_region(image, (0, 0, 9, 9), (3, 3), "opencv").shape == (3, 3, 3)


def _tiny() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()
