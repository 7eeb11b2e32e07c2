"""What decoding only the crop's window would save on W4's image sets: libjpeg-turbo's
TurboJPEG 3 API (`tj3SetCroppingRegion`, what tf.data's `decode_and_crop_jpeg` does through
libjpeg) against OpenCV's whole-image decode, on RandomResizedCrop's boxes (scale 0.08-1,
ratio 3/4-4/3). CPU ms per image, one thread.

No wheel that tpufeed depends on exposes the TurboJPEG 3 API. The `turbojpeg` 0.0.2 wheel
(manylinux, pybind11 bindings) carries `libturbojpeg.so.0.3.0`, which this script loads with
ctypes:

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


def _turbojpeg(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.tj3Init.restype = ctypes.c_void_p
    lib.tj3Init.argtypes = [ctypes.c_int]
    lib.tj3DecompressHeader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.tj3Get.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.tj3SetCroppingRegion.argtypes = [ctypes.c_void_p, _Region]
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", required=True, help="path of libturbojpeg.so (TurboJPEG 3 API)")
    p.add_argument("--sets", default="imagenet,progressive,large")
    p.add_argument("--images", type=int, default=500)
    args = p.parse_args(argv)
    import cv2

    from tpufeed import codec

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
        print(f"{image_set:12} OpenCV whole {whole:.2f} ms   TurboJPEG crop window {window:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
