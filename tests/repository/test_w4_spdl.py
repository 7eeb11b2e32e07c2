"""W4's SPDL rows (benchmarks/vision_spdl.py): Meta's SPDL gives the recipe every W4 row gives
(torchvision's crop box, resized to 224, mirrored, normalised, float32 batches with labels), a
record it cannot decode stops the run, and its rows run at a tiny size (the numbers mean
nothing here). The tests that run SPDL skip where spdl or its FFmpeg libraries are not
installed (`bash benchmarks/setup_spdl.sh`, a benchmark's own setup, not tpufeed's), saying so;
the tests of how vision.py picks, names and compares the rows run everywhere."""

from __future__ import annotations

import io
import logging
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from benchmarks import vision  # noqa: E402
from benchmarks.photos import make_images  # noqa: E402
from benchmarks.vision_spdl import (  # noqa: E402
    VARIANTS,
    SpdlOptions,
    ThreadReaders,
    decoder,
    draw,
    epoch_order,
    make_batch,
    spdl_missing,
    spdl_rows,
)
from benchmarks.vision_work import MEAN, SIZE, STD  # noqa: E402

MISSING = spdl_missing()
needs_spdl = pytest.mark.skipif(
    MISSING is not None, reason=f"spdl is not installed here: {MISSING}"
)


def _shard(folder, images) -> dict:
    """`images` [(JPEG bytes, label)] as one ArrayRecord shard, described as prepare() does."""
    from tpufeed import codec
    from tpufeed.sources.array_record import write_array_records

    path = os.path.join(folder, "images.array_record")
    records = [codec.encode({"image": data, "label": np.int32(label)}) for data, label in images]
    write_array_records(path, records, options="group_size:1")
    return {"array_record": [path], "counts": [len(images)], "images": len(images)}


def _pil_reference(data: bytes, box, mirror: bool) -> np.ndarray:
    """The PIL rows' work on one image, for a given box and mirror."""
    left, top, w, h = box
    with Image.open(io.BytesIO(data)) as image:
        image = image.convert("RGB").resize(
            (SIZE, SIZE), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
    pixels = np.asarray(image, np.float32)
    pixels = pixels[:, ::-1] if mirror else pixels
    return (pixels / 255 - MEAN) / STD


@needs_spdl
def test_spdl_gives_the_recipe_of_every_w4_row(tmp_path):
    images = make_images(12, "imagenet")
    files = _shard(str(tmp_path), images)
    readers = ThreadReaders(files)
    decode = decoder(readers, SpdlOptions())
    batch = make_batch([decode((3, i)) for i in range(len(images))])
    readers.close()
    assert batch["image"].shape == (12, SIZE, SIZE, 3) and batch["image"].dtype == np.float32
    assert batch["label"].dtype == np.int32
    assert batch["label"].tolist() == [label for _, label in images]
    mirrored = set()
    for i, (data, _) in enumerate(images):
        with Image.open(io.BytesIO(data)) as image:
            box, mirror = draw(*image.size, 3, i)
        mirrored.add(mirror)
        levels = np.abs(batch["image"][i] - _pil_reference(data, box, mirror)) * STD * 255
        # libjpeg-turbo's and FFmpeg's IDCT and chroma upsampling, Pillow's and swscale's
        # antialiased bilinear: within ~2 levels of 255 on average
        assert levels.mean() < 3, (i, box, mirror, levels.mean())
        unmirrored = np.abs(batch["image"][i] - _pil_reference(data, box, not mirror))
        assert (unmirrored * STD * 255).mean() > levels.mean() + 3, i  # the mirror is applied
    assert mirrored == {True, False}


def test_the_draws_and_the_order_do_not_depend_on_the_threads():
    assert draw(500, 375, 1, 7) == draw(500, 375, 1, 7)
    assert len({draw(500, 375, epoch, 7) for epoch in range(8)}) > 1
    order = list(epoch_order(50, 3))
    assert len(order) == 150
    epochs = [[index for epoch, index in order if epoch == e] for e in range(3)]
    assert all(sorted(e) == list(range(50)) for e in epochs)  # each record once an epoch
    assert epochs[0] != epochs[1] != epochs[2]


@needs_spdl
@pytest.mark.parametrize("stages", ["per-image", "per-batch"])
def test_a_record_ffmpeg_cannot_decode_stops_the_run(tmp_path, caplog, stages):
    """SPDL drops a failed item by default, logged; the rows fail instead (max_failures=0)."""
    images = make_images(20, "imagenet")
    images[7] = (b"\xff\xd8 not a JPEG", 0)
    files = _shard(str(tmp_path), images)
    caplog.set_level(logging.ERROR)
    with pytest.raises(Exception, match="pipeline stages failed"):
        for _ in spdl_rows(SpdlOptions(stages=stages))(files, 1, 2):
            pass
    assert "record 7: FFmpeg found no picture in its 13 bytes" in caplog.text


@needs_spdl
@pytest.mark.slow
@pytest.mark.parametrize("row", sorted(VARIANTS))
def test_the_spdl_rows_run_on_a_tiny_image_set(tmp_path, row):
    files = vision.prepare(str(tmp_path), 64, "progressive-444")
    # measure() checks every batch's shape and dtype, and that each epoch gave all 64 images
    result = vision.measure(row, files, passes=1, workers=2)
    assert len(result["images_per_s"]) == 1 and result["cpu_s_per_image"] > 0


def test_without_spdl_the_default_rows_leave_it_out_saying_so(monkeypatch, capsys):
    monkeypatch.setattr(vision, "spdl_missing", lambda: "no spdl here; run setup_spdl.sh")
    rows = vision.rows_here(list(vision.ROWS), asked=False)
    assert "spdl-threads" in vision.ROWS and "spdl-threads" not in rows
    assert "the SPDL row is left out: no spdl here" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no spdl here; run setup_spdl.sh"):
        vision.rows_here(["tpufeed", "spdl-batch-threads"], asked=True)
    monkeypatch.setattr(vision, "spdl_missing", lambda: None)
    assert vision.rows_here(["tpufeed", "spdl-threads"], asked=True) == ["tpufeed", "spdl-threads"]


def test_the_spdl_row_is_named_counted_and_compared_as_n_threads():
    def rounds(rate: float, cpu_s: float) -> list[dict]:
        result = {
            "images_per_s": [rate],
            "cpu_s_per_image": cpu_s,
            "first_batch_s": 0.3,
            "rss_main_mib": 100.0,
            "pss_tree_mib": 200.0,
            "load_at_start": 1.0,
        }
        return [result]

    rows = vision.summarise(
        {"spdl-threads": rounds(100.0, 0.004), "tpufeed-workers": rounds(150.0, 0.002)},
        workers=4,
        cores=8,
    )
    spdl = next(r for r in rows if r["key"] == "spdl-threads")
    assert spdl["row"] == "spdl 4 threads" and spdl["cores"] == 4 and spdl["per_core"] == 25.0
    checks = {name: value for name, value, _ in vision.targets(rows, 1000)}
    assert checks["tpufeed N workers / SPDL (spdl 4 threads)"] == 1.5
    assert checks["  the same from CPU time per image"] == 2.0
