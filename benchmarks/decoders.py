"""JPEG decoders for a random-resized-crop box, one image at a time in one thread.

    python -m benchmarks.vision --decoders --image-set imagenet --rounds 3 --passes 1

For each decoder that is installed: CPU ms per image (time.process_time, medians of the
interleaved repeats) to turn the JPEG and a box from `sample_crop_box` into 224x224 uint8 RGB,
and the mean absolute difference (0..255 levels, median and worst image) from the reference:
Pillow decoding the whole image, then the same exact-box bilinear resample. Every candidate
except the Pillow ones and tf.io resamples with tpufeed's OpenCV resample of the box
(`resize_region`), so the columns compare the decoders: what they decode (all, a reduced
scale, the rows down to the box, the box's window) and how fast.

Candidates, where importable: Pillow (whole; and draft, tpufeed's "pillow" backend), OpenCV
(whole; and IMREAD_REDUCED, tpufeed's "opencv" backend), simplejpeg (scaled decode),
imagecodecs (libjpeg-turbo 3, whole), pyvips with pyvips-binary (shrink-on-load, sequential
access: rows below the box are not decoded), PyTurboJPEG (needs a system libturbojpeg: its
wheel carries none), and with W4_TF_DECODER=1 tf.io.decode_and_crop_jpeg in a tf.function
(libjpeg-turbo's crop_scanline/skip_scanlines: only the box's window is decoded).
"""

from __future__ import annotations

import io
import math
import os
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.shards import ShardReader

SIZE = 224


def _finish(image: np.ndarray, box: tuple, scale: float, origin: tuple, bgr: bool) -> np.ndarray:
    """Resample `box` (full-size coordinates) of `image`, decoded at 1/scale with its top-left
    pixel at `origin` (reduced coordinates), with tpufeed's OpenCV resample."""
    from tpufeed.transforms.region import opencv, resize_region

    top, left, h, w = box
    reduced = (top / scale - origin[0], left / scale - origin[1], h / scale, w / scale)
    height, width = image.shape[:2]  # box edges rounded at 1/scale may pass the last pixel
    reduced = (
        reduced[0],
        reduced[1],
        min(reduced[2], height - reduced[0]),
        min(reduced[3], width - reduced[1]),
    )
    out = resize_region(image, reduced, (SIZE, SIZE), "opencv")
    return opencv().cvtColor(out, opencv().COLOR_BGR2RGB) if bgr else out


def _reduction(box: tuple) -> int:
    from tpufeed.transforms.region import _scale_for

    return _scale_for(box, (SIZE, SIZE))


def _pillow() -> dict[str, Any]:
    from PIL import Image

    from tpufeed.transforms.region import decode_region

    def whole(data: bytes, box: tuple) -> Any:
        with Image.open(io.BytesIO(data)) as image:
            return _finish(np.asarray(image.convert("RGB")), box, 1, (0, 0), False)

    def draft(data: bytes, box: tuple) -> Any:
        return decode_region(data, box, (SIZE, SIZE), backend="pillow")

    return {
        "Pillow: decode all (reference decode)": whole,
        "tpufeed backend=pillow: draft + antialiased resize(box)": draft,
    }


def _opencv() -> dict[str, Any]:
    from tpufeed.transforms.region import decode_region, opencv

    cv2 = opencv()
    if cv2 is None:
        return {}
    cv2.setNumThreads(1)

    def whole(data: bytes, box: tuple) -> Any:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        return _finish(image, box, 1, (0, 0), True)

    from tpufeed.transforms import turbojpeg

    found = {
        "OpenCV: imdecode all": whole,
        "tpufeed backend=opencv: imdecode REDUCED_2/4/8 where it pays": lambda d, b: decode_region(
            d, b, (SIZE, SIZE), backend="opencv"
        ),
    }
    if turbojpeg.library() is not None:
        found["tpufeed backend=turbojpeg: the box's window, at its DCT scale"] = lambda d, b: (
            decode_region(d, b, (SIZE, SIZE), backend="turbojpeg")
        )
    return found


def _simplejpeg() -> dict[str, Any]:
    try:
        import simplejpeg
    except ImportError:
        return {}

    def scaled(data: bytes, box: tuple) -> Any:
        height, width = simplejpeg.decode_jpeg_header(data)[:2]
        f = _reduction(box)
        image = simplejpeg.decode_jpeg(
            data, "RGB", min_height=math.ceil(height / f), min_width=math.ceil(width / f)
        )
        return _finish(image, box, width / image.shape[1], (0, 0), False)

    return {f"simplejpeg {simplejpeg.__version__}: scaled decode": scaled}


def _imagecodecs() -> dict[str, Any]:
    try:
        import imagecodecs
    except ImportError:
        return {}

    def whole(data: bytes, box: tuple) -> Any:
        return _finish(imagecodecs.jpeg8_decode(data), box, 1, (0, 0), False)

    return {f"imagecodecs {imagecodecs.__version__}: jpeg8_decode all": whole}


def _pyvips() -> dict[str, Any]:
    try:
        import pyvips
    except (ImportError, OSError):
        return {}
    pyvips.cache_set_max(0)
    pyvips.concurrency_set(1)

    def shrunk(data: bytes, box: tuple) -> Any:
        f = _reduction(box)
        image = pyvips.Image.jpegload_buffer(data, shrink=f, access="sequential")
        top, left, h, w = box
        t, l_ = int(top // f), int(left // f)
        b = min(image.height, math.ceil((top + h) / f))
        r = min(image.width, math.ceil((left + w) / f))
        window = image.crop(l_, t, r - l_, b - t).numpy()
        return _finish(window, box, f, (t, l_), False)

    return {f"pyvips {pyvips.version(0)}.{pyvips.version(1)}: shrink-on-load + crop": shrunk}


def _turbojpeg() -> dict[str, Any]:
    try:
        import turbojpeg

        jpeg = turbojpeg.TurboJPEG()
    except (ImportError, RuntimeError, OSError):
        return {}  # PyTurboJPEG's wheel has no libturbojpeg; a system one is needed
    except AttributeError:
        return {}  # the `turbojpeg` wheel (tpufeed's turbojpeg extra), not PyTurboJPEG

    def scaled(data: bytes, box: tuple) -> Any:
        f = _reduction(box)
        image = jpeg.decode(data, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=(1, f))
        return _finish(image, box, f, (0, 0), False)

    return {"PyTurboJPEG: scaled decode": scaled}


def _tensorflow() -> dict[str, Any]:
    if not os.environ.get("W4_TF_DECODER"):  # ~2 s and ~500 MB to import: only when asked
        return {}
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    @tf.function
    def crop(data: Any, window: Any) -> Any:
        image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
        return tf.cast(tf.image.resize(image, (SIZE, SIZE)), tf.uint8)

    def run(data: bytes, box: tuple) -> Any:
        window = tf.constant([int(v) for v in box], tf.int32)
        return crop(tf.constant(data), window).numpy()

    return {"tf.io.decode_and_crop_jpeg + resize (tf.function, 1 thread)": run}


def candidates() -> dict[str, Any]:
    """fn(jpeg, box (top, left, h, w)) -> uint8 224x224x3 RGB, for each installed decoder."""
    out: dict[str, Any] = {}
    for group in (_pillow, _opencv, _simplejpeg, _imagecodecs, _pyvips, _turbojpeg, _tensorflow):
        out.update(group())
    return out


def measure(files: dict, repeats: int, count: int = 300) -> list[dict]:
    """CPU ms per image and the difference from the reference, on the same images and boxes."""
    from tpufeed import codec
    from tpufeed.transforms import sample_crop_box
    from tpufeed.transforms.region import image_size

    reader = ShardReader(files["array_record"], files["counts"])
    data = [codec.decode(r)["image"] for r in reader.read(range(min(count, len(reader))))]
    reader.close()
    rng = np.random.default_rng(0)
    boxes = [sample_crop_box(*image_size(d), rng) for d in data]
    # Whole-pixel boxes (sample_crop_box draws them): every decoder gets the same window.
    found = candidates()
    reference = next(iter(found.values()))
    expected = [reference(d, b).astype(np.int16) for d, b in zip(data, boxes)]
    times: dict[str, list[float]] = {name: [] for name in found}
    for _ in range(repeats):
        for name, fn in found.items():
            start = time.process_time()
            for d, b in zip(data, boxes):
                fn(d, b)
            times[name].append(1000 * (time.process_time() - start) / len(data))
    rows = []
    for name, fn in found.items():
        diffs = [np.abs(fn(d, b) - e).mean() for d, b, e in zip(data, boxes, expected)]
        rows.append(
            {
                "decoder": name,
                "cpu_ms_per_image": statistics.median(times[name]),
                "diff_median": float(np.median(diffs)),
                "diff_worst": float(np.max(diffs)),
            }
        )
    return rows


def print_decoders(files: dict, repeats: int) -> None:
    print(
        f"{files['images']} images, {files.get('encoding', '500x375 q90')}, mean "
        f"{files['mean_bytes'] / 1e3:.0f} KB\n"
        "| decoder (random-resized-crop box -> 224x224 uint8) | CPU ms/image | "
        "difference from the reference, median / worst image |\n|---|---|---|"
    )
    for r in measure(files, repeats):
        print(
            f"| {r['decoder']} | {r['cpu_ms_per_image']:.2f} | "
            f"{r['diff_median']:.2f} / {r['diff_worst']:.2f} |",
            flush=True,
        )
