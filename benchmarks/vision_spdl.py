"""W4's SPDL rows: Meta's SPDL (Scalable and Performant Data Loading) as its docs build an image
pipeline: a thread pipeline (`spdl.pipeline`) whose stages call FFmpeg through `spdl.io`, which
releases the GIL while it decodes, so N threads of one process use N cores.

    bash benchmarks/setup_spdl.sh          (once: Debian's FFmpeg 5.1 libraries, then the wheel)
    python -m benchmarks.vision --rows tpufeed-workers,tfdata-private,spdl-threads --rounds 3
    python -m benchmarks.vision --rows spdl-threads,spdl-batch-threads,spdl-input-order-threads,spdl-2x-threads,spdl-ffmpeg-threads

Per image, the same work as every W4 row (benchmarks/vision.py): the record is read from the
ArrayRecord shards (a reader per thread) and its JPEG demuxed (`spdl.io.demux_image`, which
gives the size); the crop box is drawn as torchvision draws it (`pil_crop_box`: area 8-100%,
aspect 3/4-4/3, 10 attempts, then the centre); the crop, the resize to 224 (swscale's bilinear,
which widens its kernel when it shrinks: antialiased, as Pillow's) and the mirror with p 0.5
are FFmpeg's filter graph, run inside `spdl.io.decode_packets`; the decoded frames of 64
images become one uint8 batch (`spdl.io.convert_frames`), scaled to [0, 1] and normalised by
the ImageNet mean and std into float32 [64, 224, 224, 3], with the labels. Each image's draws
come from its own generator, seeded by (seed, epoch, index), so the threads draw the same
boxes whatever order they run in. The crop is `exact=1`: without it FFmpeg rounds the box's
corner down to the chroma grid (4:2:0: even pixels), which shifts the crop off the box drawn.

The row, `spdl-threads` (SPDL's documented image path, its "Design and best practices" page:
decode each image in a stage of `concurrency` N, aggregate the frames, convert the batch in
one call), and the variants tried (all in `VARIANTS`, each a row of benchmarks/vision.py):

  spdl-threads             decode stage concurrency N, pipeline thread pool N, completion
                           order, FFmpeg's decoder as SPDL opens it.
  spdl-batch-threads       the decode and the batch in one stage over 64 records at a time
                           (SPDL's image_dataloading example: `aggregate` then a batch decode
                           of concurrency N); less hand-off, but a batch waits on its slowest.
  spdl-input-order-threads the decode stage in input order (`output_order="input"`): the
                           deterministic order of the tpufeed and torch rows.
  spdl-2x-threads          2N threads and concurrency 2N: covers the GIL-held Python between
                           the FFmpeg calls (record read, box draw, filter string).
  spdl-ffmpeg-threads      FFmpeg's own threads inside each decode (`decode_config` threads 0:
                           FFmpeg picks; SPDL opens decoders with one thread, and the row keeps
                           that, as every other row runs one decode per core).

Their figures, and the row's against the other W4 rows: benchmarks/RESULTS.md, issue 45.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.shards import ShardReader
from benchmarks.vision_work import BATCH, MEAN, SEED, SIZE, STD, pil_crop_box

# x / 255 - mean) / std as one multiply and one subtract, per channel
_SCALE = (1.0 / (255.0 * STD)).astype(np.float32)
_SHIFT = (MEAN / STD).astype(np.float32)
Box = tuple[int, int, int, int]
INSTALL = "bash benchmarks/setup_spdl.sh (Debian's FFmpeg libraries, then pip install spdl)"


@dataclass(frozen=True)
class SpdlOptions:
    """One set-up of the SPDL row: `stages` "per-image" (decode, aggregate, convert: SPDL's
    best practice) or "per-batch" (aggregate, then decode and convert 64 in one task)."""

    stages: str = "per-image"
    threads_per_worker: int = 1
    output_order: str = "completion"
    decoder_threads: int | None = None  # None: as SPDL opens it (one thread); 0: FFmpeg's

    def __post_init__(self) -> None:
        if self.stages not in ("per-image", "per-batch"):
            raise ValueError(f"stages {self.stages!r}: 'per-image' or 'per-batch'")
        if self.output_order not in ("completion", "input"):
            raise ValueError(f"output_order {self.output_order!r}: 'completion' or 'input'")


VARIANTS: dict[str, SpdlOptions] = {
    "spdl-threads": SpdlOptions(),
    "spdl-batch-threads": SpdlOptions(stages="per-batch"),
    "spdl-input-order-threads": SpdlOptions(output_order="input"),
    "spdl-2x-threads": SpdlOptions(threads_per_worker=2),
    "spdl-ffmpeg-threads": SpdlOptions(decoder_threads=0),
}


def import_spdl() -> Any:
    """spdl.io, or an ImportError naming the setup step."""
    try:
        import spdl.io
        import spdl.pipeline
    except ImportError as err:  # the wheel, or FFmpeg's shared libraries it loads
        raise ImportError(f"the SPDL rows need spdl: {INSTALL} ({err})") from err
    return spdl.io


def spdl_missing() -> str | None:
    """Why the SPDL rows cannot run here (no wheel, or no FFmpeg library it can load), or None."""
    try:
        import_spdl().decode_config()  # loads the FFmpeg libraries, as the first decode would
    except (ImportError, OSError, RuntimeError) as err:
        return f"{err}" if INSTALL in str(err) else f"{err}; {INSTALL}"
    return None


def draw(width: int, height: int, epoch: int, index: int) -> tuple[Box, bool]:
    """Record `index`'s crop box in `epoch` (torchvision's draw) and whether it is mirrored,
    from a generator of its own: the same whichever thread decodes it, and when."""
    rnd = random.Random(hash((SEED, epoch, index)))
    return pil_crop_box(width, height, rnd), rnd.random() < 0.5


def filter_desc(box: Box, mirror: bool) -> str:
    """FFmpeg's filter graph for one image: crop `box` (left, top, w, h), resize to 224, mirror."""
    left, top, w, h = box
    return (
        f"crop=w={w}:h={h}:x={left}:y={top}:exact=1,"
        f"scale=w={SIZE}:h={SIZE}:flags=bilinear{',hflip' if mirror else ''},format=pix_fmts=rgb24"
    )


class ThreadReaders:
    """One ShardReader per thread (an ArrayRecordReader is not shared across threads), all
    closed at the end."""

    def __init__(self, files: dict):
        self.files = files
        self.local = threading.local()
        self.lock = threading.Lock()
        self.opened: list[ShardReader] = []

    def read(self, index: int) -> bytes:
        reader = getattr(self.local, "reader", None)
        if reader is None:
            reader = self.local.reader = ShardReader(
                self.files["array_record"], self.files["counts"]
            )
            with self.lock:
                self.opened.append(reader)
        return reader.read([index])[0]

    def close(self) -> None:
        with self.lock:
            for reader in self.opened:
                reader.close()
            self.opened.clear()


def decoder(readers: ThreadReaders, options: SpdlOptions) -> Any:
    """The per-image stage: (epoch, index) -> (FFmpeg frames cropped, resized, mirrored, label)."""
    from tpufeed import codec

    io = import_spdl()
    config = (
        None
        if options.decoder_threads is None
        else io.decode_config(decoder_options={"threads": str(options.decoder_threads)})
    )

    def decode(item: tuple[int, int]) -> tuple[Any, Any]:
        epoch, index = item
        record = codec.decode(readers.read(index))
        packets = io.demux_image(record["image"], name=f"record {index}")
        if packets.width <= 0 or packets.height <= 0:
            size = len(record["image"])
            raise ValueError(f"record {index}: FFmpeg found no picture in its {size} bytes")
        graph = filter_desc(*draw(packets.width, packets.height, epoch, index))
        return io.decode_packets(packets, filter_desc=graph, decode_config=config), record["label"]

    return decode


def make_batch(decoded: list[tuple[Any, Any]]) -> dict[str, np.ndarray]:
    """Frames of up to 64 images -> one float32 batch, normalised, with the labels."""
    io = import_spdl()
    pixels = io.to_numpy(io.convert_frames([frames for frames, _ in decoded]))
    image = np.multiply(pixels, _SCALE, dtype=np.float32)
    image -= _SHIFT
    return {"image": image, "label": np.array([label for _, label in decoded], np.int32)}


def epoch_order(n: int, epochs: int) -> Iterator[tuple[int, int]]:
    """(epoch, index) of every record, each epoch in its own shuffled order."""
    for epoch in range(epochs):
        for index in np.random.default_rng((SEED, epoch)).permutation(n).tolist():
            yield epoch, index


def _pipeline(
    files: dict, epochs: int, threads: int, options: SpdlOptions, readers: ThreadReaders
) -> Any:
    from spdl.pipeline import PipelineBuilder

    decode = decoder(readers, options)
    builder = PipelineBuilder().add_source(epoch_order(files["images"], epochs))
    if options.stages == "per-image":
        builder = (
            builder.pipe(decode, concurrency=threads, output_order=options.output_order)
            .aggregate(BATCH)
            .pipe(make_batch)
        )
    else:

        def decode_batch(items: list[tuple[int, int]]) -> dict[str, np.ndarray]:
            return make_batch([decode(item) for item in items])

        builder = builder.aggregate(BATCH).pipe(
            decode_batch, concurrency=threads, output_order=options.output_order
        )
    # max_failures=0: a record that fails stops the run (SPDL's default drops it, logged)
    return builder.add_sink(4).build(num_threads=threads, max_failures=0)


def spdl_rows(options: SpdlOptions) -> Any:
    """A W4 runner (files, epochs, workers) -> batches: SPDL with `workers` threads."""

    def rows(files: dict, epochs: int, workers: int) -> Iterator[dict]:
        threads = workers * options.threads_per_worker
        readers = ThreadReaders(files)
        pipeline = _pipeline(files, epochs, threads, options, readers)
        try:
            with pipeline.auto_stop(timeout=60):
                yield from pipeline.get_iterator(timeout=600)
        finally:
            readers.close()

    return rows


RUNNERS = {name: spdl_rows(options) for name, options in VARIANTS.items()}
