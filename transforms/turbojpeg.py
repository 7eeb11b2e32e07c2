"""Decode a crop's JPEG at its DCT scale with libjpeg-turbo 3: only the crop's window where a
libturbojpeg with the TurboJPEG 3 API is found (through ctypes), else the whole image through
simplejpeg, which carries libjpeg-turbo 3 inside its extension.

`decode_region(..., backend="turbojpeg")` decodes, with a libturbojpeg 3, only the rows and
columns of the box (and one iMCU around it), at the DCT scale tpufeed picks, as tf.data's
`decode_and_crop_jpeg` does; OpenCV and Pillow decode the whole image. The window saves 6-14%
of a baseline JPEG's crop and nothing on a progressive one, whose scans are all
entropy-decoded first (docs/images.md). Without one, simplejpeg (`pip install
"tpufeed[turbojpeg]"`) decodes the whole image at the same DCT scale, the same pixels.

The library is looked for in this order: the path in `TPUFEED_LIBTURBOJPEG`; the copy the
`turbojpeg` wheel carries, where it is installed (its own Python binding is not used); the
system's `libturbojpeg`, where it has the TurboJPEG 3 API (Debian 12 and 13 ship 2.1, which
has not). simplejpeg's copy is linked into its extension, where ctypes cannot call it.

Each thread of each process has its own decompressor; the library reports errors through
its handle (TurboJPEG catches libjpeg's errors itself), never by exiting.

>>> window, inside = decode_window(data, (10.0, 20.0, 300.0, 400.0), 1, "RGB", (375, 500))  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import threading
from functools import lru_cache
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError

__all__ = ["ENV", "available", "decode_window", "library", "simplejpeg"]

ENV = "TPUFEED_LIBTURBOJPEG"
_INIT_DECOMPRESS = 1  # TJINIT_DECOMPRESS
_SUBSAMP, _WIDTH, _HEIGHT, _COLORSPACE = 4, 5, 6, 8  # TJPARAM_*
_CMYK_SPACES = (3, 4)  # TJCS_CMYK, TJCS_YCCK: no RGB output
_PIXEL_FORMATS = {"RGB": (0, 3), "L": (6, 1)}  # mode -> (TJPF_RGB / TJPF_GRAY, channels)
_MCU = {0: (8, 8), 1: (16, 8), 2: (16, 16), 3: (8, 8), 4: (8, 16), 5: (32, 8), 6: (8, 32)}  # TJSAMP
_ERR_WARNING = 0  # TJERR_WARNING: decoded, but the data is damaged


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Factor(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


def _candidates() -> list[str]:
    """Where to look for the library, in order."""
    found = [os.environ[ENV]] if os.environ.get(ENV) else []
    spec = importlib.util.find_spec("turbojpeg")  # the `turbojpeg` wheel's carried copy
    if spec is not None and spec.origin:
        libs = os.path.join(os.path.dirname(spec.origin), "turbojpeg.libs")
        found += sorted(glob.glob(os.path.join(libs, "libturbojpeg*.so*")))
    system = ctypes.util.find_library("turbojpeg")
    return found + ([system] if system else [])


def _load(path: str) -> ctypes.CDLL | None:
    """The library at `path` with its TurboJPEG 3 functions typed, or None where it is not one."""
    try:
        lib = ctypes.CDLL(path)
        lib.tj3Init.restype = ctypes.c_void_p
    except (OSError, AttributeError):  # not there, or a TurboJPEG 2 library
        return None
    void, buffer, size, number = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int
    lib.tj3Init.argtypes = [number]
    lib.tj3Destroy.argtypes = [void]
    lib.tj3DecompressHeader.argtypes = [void, buffer, size]
    lib.tj3Get.argtypes = [void, number]
    lib.tj3SetScalingFactor.argtypes = [void, _Factor]
    lib.tj3SetCroppingRegion.argtypes = [void, _Region]
    lib.tj3Decompress8.argtypes = [void, buffer, size, void, number, number]
    lib.tj3GetErrorStr.argtypes = [void]
    lib.tj3GetErrorStr.restype = ctypes.c_char_p
    lib.tj3GetErrorCode.argtypes = [void]
    return lib


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """libturbojpeg with the TurboJPEG 3 API, or None where none is found (looked for once).
    A `TPUFEED_LIBTURBOJPEG` that names no such library raises, naming it."""
    named = os.environ.get(ENV)
    if named and _load(named) is None:
        raise InvalidArgumentError(
            f"{ENV}={named!r} is not a libturbojpeg with the TurboJPEG 3 API "
            "(libjpeg-turbo 3.0 or later): fix or unset it"
        )
    for path in _candidates():
        lib = _load(path)
        if lib is not None:
            return lib
    return None


@lru_cache(maxsize=1)
def simplejpeg() -> Any:
    """The simplejpeg module (the `turbojpeg` extra), or None where it is not installed."""
    try:
        import simplejpeg as module
    except ImportError:
        return None
    return module


def available() -> bool:
    """Whether libjpeg-turbo 3 is here: a libturbojpeg 3 (`library()`) or simplejpeg's."""
    return library() is not None or simplejpeg() is not None


class _Decompressor:
    """One TurboJPEG handle, destroyed with its thread's state."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib, self.pid = lib, os.getpid()
        self.handle = lib.tj3Init(_INIT_DECOMPRESS)
        if not self.handle:
            raise MemoryError("TurboJPEG could not make a decompressor")

    def __del__(self) -> None:
        if getattr(self, "handle", None) and self.pid == os.getpid():
            self.lib.tj3Destroy(self.handle)


_local = threading.local()


def _handle(lib: ctypes.CDLL) -> int:
    """This thread's decompressor (a fresh one after a fork: handles never cross it)."""
    own = getattr(_local, "decompressor", None)
    if own is None or own.pid != os.getpid():
        own = _local.decompressor = _Decompressor(lib)
    return own.handle


def _error(lib: ctypes.CDLL, handle: int, data: bytes) -> ValueError:
    """The error of `data`; the handle, which an error can leave unusable, is replaced."""
    message = (lib.tj3GetErrorStr(handle) or b"").decode(errors="replace")
    _local.decompressor = None
    return ValueError(
        f"cannot decode image ({len(data)} bytes, starting {bytes(data[:8])!r}): "
        f"TurboJPEG: {message}"
    )


def decode_window(
    data: bytes,
    box: tuple[float, float, float, float],
    factor: int,
    mode: str,
    dims: tuple[int, int],
) -> tuple[np.ndarray, tuple[float, float, float, float]] | None:
    """(the pixels of `box` and one iMCU around it, decoded at 1/`factor` of the image's size;
    the box's place in them), or None for a JPEG that TurboJPEG cannot give in `mode` (CMYK,
    an unusual subsampling), whose data is damaged, or whose size is not `dims` (height,
    width), read from its header by the caller (a header TurboJPEG reads only in part leaves
    the last image's size in its handle). Raises ValueError for data it cannot read, naming
    it. Without a libturbojpeg 3 the window is the whole image, which simplejpeg decodes."""
    lib = library()
    if lib is None:
        return _decode_scaled(data, box, factor, mode, dims)
    handle = _handle(lib)
    if lib.tj3DecompressHeader(handle, data, len(data)):
        raise _error(lib, handle, data)
    width, height = lib.tj3Get(handle, _WIDTH), lib.tj3Get(handle, _HEIGHT)
    if (height, width) != dims:
        _local.decompressor = None  # read in part: a fresh handle for the next image
        return None
    subsampling = lib.tj3Get(handle, _SUBSAMP)
    if lib.tj3Get(handle, _COLORSPACE) in _CMYK_SPACES or subsampling not in _MCU:
        return None
    lib.tj3SetScalingFactor(handle, _Factor(1, factor))
    mcu_w, mcu_h = _MCU[subsampling]
    mcu_w, mcu_h = -(-mcu_w // factor), -(-mcu_h // factor)
    top, left, h, w = (v / factor for v in box)
    # One iMCU around the box: the upsampling of a window's edge lacks its neighbours.
    x0 = max(0, int(np.floor(left)) - mcu_w)
    x0 -= x0 % mcu_w  # TurboJPEG crops at whole scaled iMCU columns
    y0 = max(0, int(np.floor(top)) - mcu_h)
    x1 = min(-(-width // factor), int(np.ceil(left + w)) + mcu_w)
    y1 = min(-(-height // factor), int(np.ceil(top + h)) + mcu_h)
    pixel_format, channels = _PIXEL_FORMATS[mode]
    out = np.empty((y1 - y0, x1 - x0, channels), np.uint8)
    if lib.tj3SetCroppingRegion(handle, _Region(x0, y0, x1 - x0, y1 - y0)):
        raise _error(lib, handle, data)
    if lib.tj3Decompress8(handle, data, len(data), out.ctypes.data, 0, pixel_format):
        if lib.tj3GetErrorCode(handle) == _ERR_WARNING:
            _local.decompressor = None  # a fresh handle for the next image, as after an error
            return None  # damaged (cut short, say): OpenCV decides, as with backend="opencv"
        raise _error(lib, handle, data)
    return out, (top - y0, left - x0, h, w)


def _decode_scaled(
    data: bytes,
    box: tuple[float, float, float, float],
    factor: int,
    mode: str,
    dims: tuple[int, int],
) -> tuple[np.ndarray, tuple[float, float, float, float]] | None:
    """`decode_window`'s answer from simplejpeg: the whole image at 1/`factor`, the box's place
    in it; None where libjpeg-turbo cannot give it in `mode` (CMYK) or warns of damage (OpenCV
    decides, as with `backend="opencv"`)."""
    module = simplejpeg()
    if module is None:
        raise InvalidArgumentError(
            "the turbojpeg backend needs libjpeg-turbo 3: `pip install tpufeed[turbojpeg]` "
            f"(simplejpeg), or the path of a libturbojpeg 3 in {ENV}"
        )
    try:
        height, width, colorspace, _ = module.decode_jpeg_header(data)
    except ValueError as e:
        raise ValueError(
            f"cannot decode image ({len(data)} bytes, starting {bytes(data[:8])!r}): "
            f"libjpeg-turbo: {e}"
        ) from None
    scaled = (-(-height // factor), -(-width // factor))
    if (height, width) != dims or colorspace in ("CMYK", "YCCK"):
        return None
    try:  # the smallest DCT scale that is at least `scaled`: 1/factor
        image = module.decode_jpeg(
            data, "RGB" if mode == "RGB" else "GRAY", min_height=scaled[0], min_width=scaled[1]
        )
    except ValueError:  # damaged (cut short, say): strict refuses what libjpeg-turbo warns of
        return None
    if image.shape[:2] != scaled:
        return None
    top, left, h, w = box
    return image.reshape(*scaled, -1), (top / factor, left / factor, h / factor, w / factor)
