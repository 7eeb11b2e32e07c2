"""What decoding only the crop's window would save on W4's image sets: libjpeg-turbo's
TurboJPEG 3 API (`tj3SetCroppingRegion`, what tf.data's `decode_and_crop_jpeg` does through
libjpeg) against OpenCV's whole-image decode, on RandomResizedCrop's boxes (scale 0.08-1,
ratio 3/4-4/3). CPU ms per image, one thread. Then the whole crop to 224x224 as tpufeed makes it
(`decode_region`: OpenCV at reduced DCT scale, the box resampled) against what a TurboJPEG
backend would do (only the box's window, at the same DCT scale, the same resample), with the
mean difference between the two, median and worst image.

No wheel's Python exposes the TurboJPEG 3 API's crop. The `turbojpeg` 0.0.2 wheel (manylinux,
pybind11 bindings) carries `libturbojpeg.so.0.3.0`, which this script loads with ctypes (as
tpufeed's `backend="turbojpeg"` does: `tpufeed.transforms.turbojpeg`; the decode_region column
below is `backend="opencv"`):

    pip download --no-deps turbojpeg==0.0.2 -d /tmp/tj && unzip -o /tmp/tj/*.whl -d /tmp/tj/x
    python -m benchmarks.crop_window --lib /tmp/tj/x/turbojpeg.libs/libturbojpeg-*.so.0.3.0
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.shards import ShardReader  # noqa: E402
from benchmarks.vision import prepare  # noqa: E402

_DECOMPRESS, _JPEG_WIDTH, _JPEG_HEIGHT, _RGB = 1, 5, 6, 0


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Factor(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


_SUBSAMP = 4  # TJPARAM_SUBSAMP
_MCU_WIDTH = {0: 8, 1: 16, 2: 16, 3: 8, 4: 8, 5: 32, 6: 16}  # by TJSAMP


def _turbojpeg(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.tj3Init.restype = ctypes.c_void_p
    lib.tj3Init.argtypes = [ctypes.c_int]
    lib.tj3DecompressHeader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.tj3Get.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.tj3SetCroppingRegion.argtypes = [ctypes.c_void_p, _Region]
    lib.tj3SetScalingFactor.argtypes = [ctypes.c_void_p, _Factor]
    lib.tj3Decompress8.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    return lib


def _boxes(lib: ctypes.CDLL, handle: int, datas: list[bytes]) -> list[tuple[int, int, int, int]]:
    """RandomResizedCrop's boxes (x aligned down to 16 pixels, as the API requires)."""
    rng = np.random.default_rng(0)
    boxes = []
    for data in datas:
        lib.tj3DecompressHeader(handle, data, len(data))
        width, height = lib.tj3Get(handle, _JPEG_WIDTH), lib.tj3Get(handle, _JPEG_HEIGHT)
        area = width * height * rng.uniform(0.08, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w = int(min(width, round(np.sqrt(area * ratio))))
        h = int(min(height, round(np.sqrt(area / ratio))))
        x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
        boxes.append((x - x % 16, y, w + x % 16, h))
    return boxes


def _scaled_window(lib: ctypes.CDLL, handle: int, data: bytes, box: tuple) -> np.ndarray:
    """What a TurboJPEG backend of `decode_region` would do: the box's window (and a pixel
    around it) at the DCT scale tpufeed picks, then tpufeed's own resample of the box."""
    from tpufeed.transforms.region import _scale_for, resize_region

    lib.tj3DecompressHeader(handle, data, len(data))
    width, height = lib.tj3Get(handle, _JPEG_WIDTH), lib.tj3Get(handle, _JPEG_HEIGHT)
    factor = _scale_for(box, (224, 224))
    lib.tj3SetScalingFactor(handle, _Factor(1, factor))
    top, left, h, w = (v / factor for v in box)
    mcu = max(1, -(-_MCU_WIDTH.get(lib.tj3Get(handle, _SUBSAMP), 8) // factor))
    # One iMCU around the box: the upsampling of a window's edge rows and columns lacks their
    # neighbours, so they differ from a whole decode's.
    x0 = max(0, int(np.floor(left)) - mcu)
    x0 -= x0 % mcu
    y0 = max(0, int(np.floor(top)) - mcu)
    x1 = min(-(-width // factor), int(np.ceil(left + w)) + mcu)
    y1 = min(-(-height // factor), int(np.ceil(top + h)) + mcu)
    out = np.empty((y1 - y0, x1 - x0, 3), np.uint8)
    if lib.tj3SetCroppingRegion(handle, _Region(x0, y0, x1 - x0, y1 - y0)) or lib.tj3Decompress8(
        handle, data, len(data), out.ctypes.data, 0, _RGB
    ):
        raise RuntimeError(f"TurboJPEG failed on box {box} at 1/{factor}")
    return resize_region(out, (top - y0, left - x0, h, w), (224, 224), "opencv")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", required=True, help="path of libturbojpeg.so (TurboJPEG 3 API)")
    p.add_argument("--sets", default="imagenet,progressive,large")
    p.add_argument("--images", type=int, default=500)
    args = p.parse_args(argv)
    import cv2

    from tpufeed import codec
    from tpufeed.transforms.region import decode_region

    cv2.setNumThreads(1)
    lib = _turbojpeg(args.lib)
    handle = lib.tj3Init(_DECOMPRESS)
    for image_set in args.sets.split(","):
        total = 1000 if image_set == "large" else 2000
        files = prepare(os.path.join(ROOT, "benchmarks", "data"), total, image_set)
        reader = ShardReader(files["array_record"], files["counts"])
        count = min(args.images, total)
        datas = [bytes(codec.decode(r)["image"]) for r in reader.read(range(count))]
        reader.close()
        boxes = _boxes(lib, handle, datas)
        started = time.process_time()
        for data in datas:
            cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        whole = 1000 * (time.process_time() - started) / count
        lib.tj3SetScalingFactor(handle, _Factor(1, 1))
        started = time.process_time()
        for data, (x, y, w, h) in zip(datas, boxes):
            out = np.empty((h, w, 3), np.uint8)
            failed = (
                lib.tj3DecompressHeader(handle, data, len(data))
                or lib.tj3SetCroppingRegion(handle, _Region(x, y, w, h))
                or lib.tj3Decompress8(handle, data, len(data), out.ctypes.data, 0, _RGB)
            )
            if failed:
                raise RuntimeError(f"{image_set}: TurboJPEG failed on box {(x, y, w, h)}")
        window = 1000 * (time.process_time() - started) / count
        regions = [(float(y), float(x), float(h), float(w)) for x, y, w, h in boxes]
        started = time.process_time()
        ours = [
            decode_region(data, box, (224, 224), "RGB", "opencv")
            for data, box in zip(datas, regions)
        ]
        tpufeed_ms = 1000 * (time.process_time() - started) / count
        started = time.process_time()
        theirs = [_scaled_window(lib, handle, data, box) for data, box in zip(datas, regions)]
        scaled = 1000 * (time.process_time() - started) / count
        differs = [
            float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(ours, theirs)
        ]
        print(
            f"{image_set:12} OpenCV whole {whole:.2f} ms   TurboJPEG crop window {window:.2f} ms"
            f"   tpufeed decode_region {tpufeed_ms:.2f} ms   TurboJPEG window at its DCT scale +"
            f" the same resample {scaled:.2f} ms (mean difference, median / worst image:"
            f" {np.median(differs):.2f} / {max(differs):.2f} levels)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
