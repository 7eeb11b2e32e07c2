"""Decode only what a crop needs: a region of an encoded image, resized, at reduced JPEG scale.

A crop box is chosen on the image's full-size coordinates (read from the header, nothing
decoded), so it is the same box whichever decoder runs. A JPEG is then decoded at the smallest
DCT scale (1, 1/2, 1/4, 1/8) that still gives the box at least the target size, and the box is
resampled from that. Other formats (PNG, GIF, WebP...) are decoded whole by Pillow.

Three backends, chosen on measurements (docs/images.md): "opencv" (cv2.imdecode with
IMREAD_REDUCED_*, then a bilinear warp of the box, or INTER_AREA when shrinking more than 2x),
"turbojpeg" (libjpeg-turbo 3 at the same DCT scale, only the box's window where a libturbojpeg
3 is found: `tpufeed.transforms.turbojpeg`; then OpenCV's resample) and "pillow"
(Image.draft, then Image.resize with the box, antialiased bilinear). "auto" takes TurboJPEG
where libjpeg-turbo 3 and `cv2` are installed, else OpenCV when `cv2` imports, else Pillow. All
are imported on first use.

>>> box = (10.0, 20.0, 300.0, 400.0)  # top, left, height, width on the full-size image
>>> decode_region(data, box, (224, 224)).shape  # doctest: +SKIP
(224, 224, 3)
"""

from __future__ import annotations

import io
import math

import numpy as np

from tpufeed.errors import InvalidArgumentError
from tpufeed.transforms import turbojpeg
from tpufeed.transforms.image import decode_image, load_pillow, opencv

__all__ = [
    "BACKENDS",
    "decode_region",
    "image_size",
    "is_jpeg",
    "opencv",
    "resize_region",
    "resolve_backend",
]

BACKENDS = ("auto", "opencv", "pillow", "turbojpeg")
Box = tuple[float, float, float, float]  # top, left, height, width (full-size pixels)
_SCALES = (8, 4, 2, 1)  # JPEG DCT scaling: the output is 1/f of the image on each side
_SOS = 0xDA  # start of scan: entropy-coded data follows, no more markers to walk


def resolve_backend(backend: str) -> str:
    """ "turbojpeg", "opencv" or "pillow" for a backend name; "auto" is the first installed."""
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"decoder backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "pillow":
        load_pillow()
        return backend
    if backend in ("auto", "turbojpeg") and opencv() is not None and turbojpeg.available():
        return "turbojpeg"
    if backend == "turbojpeg":
        raise InvalidArgumentError(
            "decoder backend 'turbojpeg' needs cv2 and libjpeg-turbo 3: "
            "`pip install tpufeed[turbojpeg]` (simplejpeg), with any OpenCV (tpufeed[opencv] "
            f"where there is none), or the path of a libturbojpeg 3 in {turbojpeg.ENV}"
        )
    if opencv() is not None:
        return "opencv"
    if backend == "opencv":
        raise InvalidArgumentError(
            "decoder backend 'opencv' needs cv2: any OpenCV distribution, or "
            "`pip install tpufeed[opencv]` (opencv-python-headless); or backend='auto'"
        )
    load_pillow()
    return "pillow"


def is_jpeg(data: bytes) -> bool:
    return bytes(data[:3]) == b"\xff\xd8\xff"


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a JPEG's start-of-frame marker, or None where it is not found.

    Pillow's open() reads the same in ~0.5 ms (it parses every marker); this walk ~10 us. It
    reads bytes from outside within bounds: every step moves forward (a segment's length
    counts its own two bytes, so one below 2 is refused rather than walked in place), a
    segment that runs past the end stops the walk, and so does the start of the scan data.
    None sends the image to a decoder, which says what is wrong with it.
    """
    at, end = 2, len(data) - 9
    while at < end:
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = (data[at + 5] << 8) | data[at + 6]
            width = (data[at + 7] << 8) | data[at + 8]
            return (height, width) if height and width else None
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            at += 2
            continue
        length = (data[at + 2] << 8) | data[at + 3]
        if marker == _SOS or length < 2 or at + 2 + length > len(data):
            return None  # scan data before any frame, or a length that cannot be right
        at += 2 + length
    return None


def image_size(data: bytes) -> tuple[int, int]:
    """(height, width) of an encoded image, read from its header without decoding the pixels."""
    if is_jpeg(data):
        size = _jpeg_size(data)
        if size is not None:
            return size
    image_module = load_pillow()
    try:
        with image_module.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Exception as e:  # noqa: BLE001 - Pillow raises many kinds for bad input
        raise ValueError(
            f"cannot read image header ({len(data)} bytes, starting "
            f"{bytes(data[:8])!r}): {type(e).__name__}: {e}"
        ) from None
    return height, width


def _check_box(box: Box, height: int, width: int) -> None:
    top, left, h, w = box
    if not (
        h > 0
        and w > 0
        and top >= 0
        and left >= 0
        and top + h <= height + 1e-6
        and left + w <= width + 1e-6
    ):
        raise ValueError(
            f"crop box (top, left, height, width) {box} is not inside the {height}x{width} image"
        )


def _scale_for(box: Box, size: tuple[int, int]) -> int:
    """The largest DCT reduction that keeps the box at least `size` on both sides."""
    _, _, h, w = box
    return next(f for f in _SCALES if f == 1 or (h / f >= size[0] and w / f >= size[1]))


def decode_region(
    data: bytes, box: Box, size: tuple[int, int], mode: str = "RGB", backend: str = "auto"
) -> np.ndarray:
    """uint8 (size[0], size[1], channels): the `box` of the encoded image, resampled to `size`.

    JPEGs in mode RGB or L decode at reduced scale where the box allows; anything else decodes
    whole with Pillow (`decode_image`) and is then resampled the same way.
    """
    backend = resolve_backend(backend)
    if not is_jpeg(data) or mode not in ("RGB", "L"):
        image = decode_image(data, mode)
        _check_box(box, *image.shape[:2])
        return resize_region(image, box, size, backend)
    dims = _jpeg_size(data) if backend == "turbojpeg" else None
    if dims is not None:  # else OpenCV reads it, or says why it cannot
        _check_box(box, *dims)
        decoded = turbojpeg.decode_window(data, box, _scale_for(box, size), mode, dims)
        if decoded is not None:
            window, inside = decoded
            return resize_region(window, inside, size, backend)
    scale = _scale_for(box, size)
    if backend == "pillow":
        return _region_pillow(data, box, scale, size, mode)
    image = _decode_opencv(data, scale, mode)
    top, left, h, w = box
    # Reduced pixel k covers full-size pixels [k*f, (k+1)*f): box edges scale by 1/f exactly.
    reduced = (top / scale, left / scale, h / scale, w / scale)
    _check_box(reduced, *image.shape[:2])
    out = resize_region(image, reduced, size, backend)
    if mode == "RGB":
        out = opencv().cvtColor(out, opencv().COLOR_BGR2RGB)  # on the small output
    return out


def _decode_opencv(data: bytes, scale: int, mode: str) -> np.ndarray:
    cv2 = opencv()
    color = mode == "RGB"
    flag = {
        1: cv2.IMREAD_COLOR if color else cv2.IMREAD_GRAYSCALE,
        2: cv2.IMREAD_REDUCED_COLOR_2 if color else cv2.IMREAD_REDUCED_GRAYSCALE_2,
        4: cv2.IMREAD_REDUCED_COLOR_4 if color else cv2.IMREAD_REDUCED_GRAYSCALE_4,
        8: cv2.IMREAD_REDUCED_COLOR_8 if color else cv2.IMREAD_REDUCED_GRAYSCALE_8,
    }[scale]
    # Pillow and the header size ignore EXIF orientation; OpenCV would apply it.
    image = cv2.imdecode(np.frombuffer(data, np.uint8), flag | cv2.IMREAD_IGNORE_ORIENTATION)
    if image is None:
        raise ValueError(
            f"cannot decode image ({len(data)} bytes, starting {bytes(data[:8])!r}): "
            f"OpenCV could not decode it as JPEG"
        )
    return image[:, :, None] if image.ndim == 2 else image


def _region_pillow(
    data: bytes, box: Box, scale: int, size: tuple[int, int], mode: str
) -> np.ndarray:
    """draft() to 1/scale, then one resize of the box: no array copies on the way."""
    image_module = load_pillow()
    try:
        image = image_module.open(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001 - Pillow raises many kinds for bad input
        raise _undecodable(data, e) from None
    with image:
        width, height = image.size
        _check_box(box, height, width)
        try:
            if scale > 1:
                # draft() takes the largest reduction leaving the image at least this size
                # (it rounds down: read back the scale it took).
                image.draft(mode, (max(1, width // scale), max(1, height // scale)))
                scale = next(
                    (
                        f
                        for f in _SCALES
                        if image.size == (math.ceil(width / f), math.ceil(height / f))
                    ),
                    1,
                )
            loaded = image.convert(mode) if image.mode != mode else image
            top, left, h, w = (v / scale for v in box)
            out = np.asarray(
                loaded.resize(
                    (size[1], size[0]),
                    image_module.Resampling.BILINEAR,
                    box=(left, top, left + w, top + h),
                )
            )
        except Exception as e:  # noqa: BLE001 - Pillow raises many kinds for bad input
            raise _undecodable(data, e) from None
    return out[:, :, None] if out.ndim == 2 else out


def _undecodable(data: bytes, error: Exception) -> ValueError:
    return ValueError(
        f"cannot decode image ({len(data)} bytes, starting {bytes(data[:8])!r}): "
        f"{type(error).__name__}: {error}"
    )


def resize_region(
    image: np.ndarray, box: Box, size: tuple[int, int], backend: str = "auto"
) -> np.ndarray:
    """uint8 (size[0], size[1], channels): `box` of a uint8 image, resampled bilinearly.

    Pixel centres sit at half-integers of the box's coordinates (as in Pillow and OpenCV's
    resize), so a box may start or end between pixels.
    """
    backend = resolve_backend(backend)
    _check_box(box, *image.shape[:2])
    channels = image.shape[2]
    if backend == "pillow":
        out = _resize_pillow(image, box, size)
    else:
        out = _resize_opencv(image, box, size)
    return out.reshape(size[0], size[1], channels)


def _resize_pillow(image: np.ndarray, box: Box, size: tuple[int, int]) -> np.ndarray:
    image_module = load_pillow()
    top, left, h, w = box
    pil = image_module.fromarray(image[:, :, 0] if image.shape[2] == 1 else image)
    return np.asarray(
        pil.resize(
            (size[1], size[0]), image_module.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
    )


def _resize_opencv(image: np.ndarray, box: Box, size: tuple[int, int]) -> np.ndarray:
    cv2 = opencv()
    top, left, h, w = box
    sy, sx = h / size[0], w / size[1]
    if all(float(v).is_integer() for v in box):
        # A whole-pixel box: resize maps pixel centres as the warp below does, 5x faster.
        window = image[int(top) : int(top + h), int(left) : int(left + w)]
        method = cv2.INTER_AREA if max(sy, sx) > 2 else cv2.INTER_LINEAR
        return cv2.resize(window, (size[1], size[0]), interpolation=method)
    if max(sy, sx) > 2:
        # Shrinking more than 2x: bilinear would skip pixels (aliasing); area averaging does not.
        t, l_ = int(round(top)), int(round(left))
        b, r = max(t + 1, int(round(top + h))), max(l_ + 1, int(round(left + w)))
        return cv2.resize(image[t:b, l_:r], (size[1], size[0]), interpolation=cv2.INTER_AREA)
    # Only the box (and one pixel around it) is resampled; the warp maps each output pixel
    # centre to its exact, fractional source position, borders replicated like Pillow's.
    t0, l0 = max(0, int(math.floor(top)) - 1), max(0, int(math.floor(left)) - 1)
    t1 = min(image.shape[0], int(math.ceil(top + h)) + 1)
    l1 = min(image.shape[1], int(math.ceil(left + w)) + 1)
    window = image[t0:t1, l0:l1]
    matrix = np.array(
        [[sx, 0.0, left + 0.5 * sx - 0.5 - l0], [0.0, sy, top + 0.5 * sy - 0.5 - t0]], np.float64
    )
    return cv2.warpAffine(
        window,
        matrix,
        (size[1], size[0]),
        flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_REPLICATE,
    )
