"""W4, vision input: the ResNet-50 training recipe on real photographs, images/s per system.

    python benchmarks/compare.py --workload W4 --rounds 3      (the same as)
    python -m benchmarks.vision --rounds 3 --workers 2 --json benchmarks/results/w4.json
    python -m benchmarks.vision --image-set large --images 1000 --rounds 3   (other photographs)
    python -m benchmarks.vision --decoders --image-set imagenet     (benchmarks/decoders.py)

Data (`--image-set`, benchmarks/photos.py): `--images` records (default 2,000), each a
distinct crop of one of the photographs that ship with scikit-learn and matplotlib, saved as
JPEG quality 90: `imagenet` (the default: 500x375 or 375x500, baseline 4:2:0, ~84 KB),
`progressive`, `444`, `progressive-444` (the same pixels, saved otherwise), `large`
(1500x1000, ~600 KB), and `legacy` (W4 up to session 14: upscaled, smooth, ~47 KB). Records
{"image": JPEG bytes, "label": photo} in 8 ArrayRecord shards, and the same as
tf.train.Examples in 8 TFRecord shards.

The work of every row, per image: random-resized-crop to 224 (area 8-100%, aspect 3/4-4/3,
10 attempts), mirror with p 0.5, scale to [0, 1] and normalise by the ImageNet mean and std
(float32); batches of 64 with the labels. Rows, each in a fresh process (one warm-up epoch,
then `--passes` timed epochs, all pooled over `--rounds`):

  pil-loop          one process: read, PIL decode, crop+resize (antialiased bilinear, as
                    torchvision), flip, normalise, stack. The 1-core limit.
  tpufeed[-pillow]  tpufeed.transforms RandomResizedCrop (decodes only what the box needs;
                    OpenCV backend, or Pillow's draft with -pillow), RandomFlip, Normalize,
                    with 0 and N workers.
  tfdata            tf.data native: sample_distorted_bounding_box (the same area and aspect
                    ranges, 10 attempts) + decode_and_crop_jpeg + resize, AUTOTUNE.
  tfdata-nondet     the same, map(deterministic=False).
  tfdata-private    deterministic=False and max_intra_op_parallelism 1 (the TPU ResNet
                    reference's imagenet_input.py sets both when it shuffles), and a private
                    thread pool of one thread a core (tf.data.Options threading).
  tfdata-1thread    tfdata-private with a pool of one thread: tf.data's kernels on one core
                    (its per-core cost, without threads that wait by spinning).
  torch             PyTorch DataLoader, N workers (persistent, prefetch 2), the pil-loop's
                    per-image function in a map-style Dataset over the ArrayRecord shards.
  spdl-threads      Meta's SPDL: a `spdl.pipeline` of N threads whose decode stage runs
                    FFmpeg (`spdl.io`, the GIL released) with the crop, resize and mirror in
                    its filter graph, then one batch conversion and normalise
                    (benchmarks/vision_spdl.py: its variants, spdl-*-threads, and its setup,
                    benchmarks/setup_spdl.sh; left out of the default rows without spdl).

Reported: images/s (median of all timed passes), CPU seconds per image (the row's process and
its children, all epochs: the per-core cost), time to the first batch (pipeline built and
workers started; the framework import not counted), peak RSS of the main process and the peak
summed PSS of its process tree, and the load when the row started.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import SHARDS, shard_counts  # noqa: E402
from benchmarks.photos import IMAGE_SETS, describe, make_images, source_photographs  # noqa: E402
from benchmarks.shards import ShardReader  # noqa: E402
from benchmarks.vision_spdl import RUNNERS as SPDL_RUNNERS  # noqa: E402
from benchmarks.vision_spdl import VARIANTS as SPDL_VARIANTS  # noqa: E402
from benchmarks.vision_spdl import spdl_missing  # noqa: E402
from benchmarks.vision_work import (  # noqa: E402
    BATCH,
    MEAN,
    RATIO,
    SCALE,
    SEED,
    SIZE,
    STD,
    pil_work,
)

ROWS = [
    "pil-loop",
    "tpufeed",
    "tpufeed-workers",
    "tpufeed-opencv",
    "tpufeed-opencv-workers",
    "tpufeed-pillow",
    "tpufeed-pillow-workers",
    "tfdata",
    "tfdata-nondet",
    "tfdata-private",
    "tfdata-1thread",
    "torch-workers",
    "spdl-threads",
]


def prepare(root: str, n: int, image_set: str = "imagenet") -> dict[str, Any]:
    """The images as 8 ArrayRecord and 8 TFRecord shards under `root`/W4-`set`-`n` (written
    once; the legacy set keeps its old folder, W4-`n`)."""
    folder = os.path.join(root, f"W4-{n}" if image_set == "legacy" else f"W4-{image_set}-{n}")
    done = os.path.join(folder, "done.json")
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)
    from tpufeed import codec
    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.tfrecord import write_tfrecords
    from tpufeed.transforms import encode_example

    images = make_images(n, image_set)
    os.makedirs(folder, exist_ok=True)
    counts = shard_counts(n)
    files: dict[str, Any] = {
        "array_record": [],
        "tfrecord": [],
        "counts": counts,
        "images": n,
        "mean_bytes": float(np.mean([len(d) for d, _ in images])),
        "sources": source_photographs(),
        "image_set": image_set,
        "encoding": describe(image_set),
    }
    start = 0
    for shard, count in enumerate(counts):
        part = images[start : start + count]
        start += count
        base = os.path.join(folder, f"shard-{shard:05d}-of-{SHARDS:05d}")
        write_array_records(
            base + ".array_record",
            [codec.encode({"image": d, "label": np.int32(y)}) for d, y in part],
            options="group_size:1",
        )
        write_tfrecords(
            base + ".tfrecord", [encode_example({"image": d, "label": y}) for d, y in part]
        )
        files["array_record"].append(base + ".array_record")
        files["tfrecord"].append(base + ".tfrecord")
    with open(done + ".tmp", "w") as f:
        json.dump(files, f)
    os.replace(done + ".tmp", done)
    return files


# -- the rows: each yields batches {"image": [<=64, 224, 224, 3] float32, "label": [<=64]} -----


def pil_loop(files: dict, epochs: int, workers: int) -> Iterator[dict]:
    from tpufeed import codec

    reader = ShardReader(files["array_record"], files["counts"])
    rnd = random.Random(SEED)
    for epoch in range(epochs):
        order = np.random.default_rng((SEED, epoch)).permutation(len(reader))
        for start in range(0, len(order), BATCH):
            out = [
                pil_work(codec.decode(r), rnd) for r in reader.read(order[start : start + BATCH])
            ]
            yield {
                "image": np.stack([o["image"] for o in out]),
                "label": np.stack([o["label"] for o in out]),
            }
    reader.close()


def _tpufeed(backend: str) -> Any:
    def rows(files: dict, epochs: int, workers: int) -> Iterator[dict]:
        import tpufeed
        from tpufeed.transforms import Normalize, RandomFlip, RandomResizedCrop

        ds = (
            tpufeed.Dataset.from_array_record(files["array_record"])
            .shuffle(SEED)
            .map(tpufeed.codec.decode)
            .random_map(RandomResizedCrop(SIZE, SCALE, RATIO, backend=backend))
            .random_map(RandomFlip())
            .map(Normalize(tuple(MEAN), tuple(STD)))
            .batch(BATCH)
            .repeat(epochs)
            .workers(workers)
        )
        it = ds.iterator()
        try:
            yield from it
        finally:
            it.close()

    return rows


def _tfdata(deterministic: bool = True, private: bool = False, threads: int = 0) -> Any:
    """tf.data's row; `deterministic=False` lets map hand out elements as they finish, and
    `private` gives the pipeline its own thread pool of one thread a core, with ops run on one
    thread each (max_intra_op_parallelism 1, as the TPU ResNet reference's imagenet_input.py);
    `threads` sizes that pool (0: one thread a core)."""

    def rows(files: dict, epochs: int, workers: int) -> Iterator[dict]:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        ds = (
            tf.data.TFRecordDataset(files["tfrecord"], num_parallel_reads=tf.data.AUTOTUNE)
            .shuffle(files["images"], seed=SEED)
            .repeat(epochs)
            .map(_tf_work(tf), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
            .batch(BATCH)
            .prefetch(tf.data.AUTOTUNE)
        )
        if private:
            options = tf.data.Options()
            options.threading.private_threadpool_size = threads or os.cpu_count() or 1
            options.threading.max_intra_op_parallelism = 1
            ds = ds.with_options(options)
        yield from ds.as_numpy_iterator()

    return rows


def _tf_work(tf: Any) -> Any:
    """The TPU reference's training crop: sample_distorted_bounding_box + decode_and_crop_jpeg +
    resize, flip, normalise (bilinear resize, as the tpufeed rows; the reference's is bicubic)."""
    tf.random.set_seed(SEED)
    features = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4])

    def work(record: Any) -> dict:
        example = tf.io.parse_single_example(record, features)
        data = example["image"]
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.io.extract_jpeg_shape(data),
            whole,
            min_object_covered=SCALE[0],
            aspect_ratio_range=RATIO,
            area_range=SCALE,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        top, left, _ = tf.unstack(begin)
        height, width, _ = tf.unstack(size)
        image = tf.io.decode_and_crop_jpeg(data, tf.stack([top, left, height, width]), channels=3)
        image = tf.image.resize(image, [SIZE, SIZE], method="bilinear")
        image = tf.image.random_flip_left_right(image)
        image = (image * (1 / 255) - MEAN) / STD
        return {"image": image, "label": tf.cast(example["label"], tf.int32)}

    return work


class _TorchPhotos:
    """Map-style torch Dataset: record i of the shards through `pil_work`."""

    def __init__(self, files: dict):
        self.reader = ShardReader(files["array_record"], files["counts"])
        self.rnd = random.Random(SEED)

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> dict:
        from tpufeed import codec

        return pil_work(codec.decode(self.reader.read([index])[0]), self.rnd)


def _torch_worker_init(worker_id: int) -> None:
    import torch

    info = torch.utils.data.get_worker_info()
    info.dataset.rnd = random.Random(info.seed)  # distinct per worker, as torch seeds `random`


def torch_rows(files: dict, epochs: int, workers: int) -> Iterator[dict]:
    import torch

    dataset = _TorchPhotos(files)
    order = [
        int(i)
        for e in range(epochs)
        for i in np.random.default_rng((SEED, e)).permutation(len(dataset))
    ]
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=order,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=2 if workers else None,
        worker_init_fn=_torch_worker_init if workers else None,
    )
    for batch in loader:
        yield {"image": batch["image"].numpy(), "label": batch["label"].numpy()}


RUNNERS = {
    "pil-loop": (pil_loop, 0),
    "tpufeed": (_tpufeed("auto"), 0),
    "tpufeed-workers": (_tpufeed("auto"), None),
    "tpufeed-pillow": (_tpufeed("pillow"), 0),
    "tpufeed-pillow-workers": (_tpufeed("pillow"), None),
    "tpufeed-opencv": (_tpufeed("opencv"), 0),
    "tpufeed-opencv-workers": (_tpufeed("opencv"), None),
    "tfdata": (_tfdata(), 0),
    "tfdata-nondet": (_tfdata(deterministic=False), 0),
    "tfdata-private": (_tfdata(deterministic=False, private=True), 0),
    "tfdata-1thread": (_tfdata(deterministic=False, private=True, threads=1), 0),
    "torch-workers": (torch_rows, None),
    **{name: (runner, None) for name, runner in SPDL_RUNNERS.items()},
}


def _import(row: str) -> None:
    """The row's framework, imported before the clock starts (and OpenCV set to one thread:
    the parallelism of every row is its workers, and 0 workers means one core)."""
    from PIL import Image  # noqa: F401

    if row.startswith("tpufeed"):
        import tpufeed  # noqa: F401
        from tpufeed.transforms.region import resolve_backend

        if resolve_backend("pillow" if "pillow" in row else "auto") != "pillow":
            import cv2  # the resampler of "opencv" and "turbojpeg"

            cv2.setNumThreads(1)
    elif row.startswith("tfdata"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow  # noqa: F401
    elif row.startswith("torch"):
        import torch  # noqa: F401
    elif row in SPDL_VARIANTS:
        why = spdl_missing()  # imports spdl and loads its FFmpeg libraries
        if why:
            raise SystemExit(f"{row}: {why}")


def _cpu_s() -> float:
    """This process's CPU seconds and its descendants', live or exited (tpufeed's workers are
    children of its fork server, not of this process)."""
    from benchmarks.measure import descendants_cpu_s

    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + descendants_cpu_s()


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def measure(row: str, files: dict, passes: int, workers: int) -> dict[str, Any]:
    """One warm-up epoch, then `passes` timed epochs, told apart by the images seen."""
    fn, fixed = RUNNERS[row]
    n = files["images"]
    _import(row)
    cpu_start = _cpu_s()
    started = time.perf_counter()
    batches = fn(files, passes + 1, workers if fixed is None else fixed)
    marks: list[float] = []
    first = None
    seen = 0
    for batch in batches:
        now = time.perf_counter()
        if first is None:
            first = now - started
            if batch["image"].shape[1:] != (SIZE, SIZE, 3) or batch["image"].dtype != np.float32:
                raise ValueError(
                    f"{row}: batch image {batch['image'].dtype}"
                    f"{batch['image'].shape}, expected float32[64, 224, 224, 3]"
                )
        seen += len(batch["label"])
        while seen >= n * (len(marks) + 1):
            marks.append(now)
    batches.close()
    if seen != n * (passes + 1):
        raise ValueError(f"{row}: {seen} images came out of {passes + 1} epochs of {n}")
    seconds = [b - a for a, b in zip(marks, marks[1:])]
    return {
        "row": row,
        "workers": workers if fixed is None else 0,
        "first_batch_s": first,
        "pass_s": seconds,
        "images_per_s": [n / s for s in seconds],
        "cpu_s_per_image": (_cpu_s() - cpu_start) / seen,
        "rss_main_mib": _peak_rss_mib(),
        "rss_child_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def _tree_pss_mib(pid: int) -> float | None:
    try:
        import psutil

        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except Exception:  # noqa: BLE001 - no psutil, or the row just ended
        return None
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except Exception:  # noqa: BLE001 - a worker that just exited
            pass
    return total / 2**20


def run_row(row: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.vision",
            "--row",
            row,
            "--passes",
            str(args.passes),
            "--workers",
            str(args.workers),
            "--images",
            str(args.images),
            "--image-set",
            args.image_set,
            "--data-dir",
            args.data_dir,
            "--json",
            out,
        ]
        load = os.getloadavg()[0]
        # A PYTHONPATH given (benchmarks/versus.py: another checkout's tpufeed, benchmarks/
        # trees.py) comes first.
        path = [p for p in (os.environ.get("PYTHONPATH"), ROOT) if p]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "TF_CPP_MIN_LOG_LEVEL": "2"}
        with open(os.path.join(tmp, "log"), "w+") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            peak = None
            while proc.poll() is None:
                pss = _tree_pss_mib(proc.pid)
                peak = pss if peak is None or (pss or 0) > peak else peak
                time.sleep(0.2)
            if proc.returncode:
                log.seek(0)
                raise SystemExit(f"row {row} failed:\n{log.read()[-4000:]}")
        with open(out) as f:
            result = json.load(f)
    result.update(load_at_start=load, pss_tree_mib=peak)
    return result


def rows_here(rows: list[str], asked: bool) -> list[str]:
    """The rows this machine can run: the SPDL rows need spdl and Debian's FFmpeg libraries
    (benchmarks/setup_spdl.sh). Named in --rows without them, the run stops, saying so; in the
    default set they are left out with a line that says why."""
    spdl = [row for row in rows if row in SPDL_VARIANTS]
    why = spdl_missing() if spdl else None
    if why is None:
        return rows
    if asked:
        raise SystemExit(f"W4 rows {spdl}: {why}")
    print(f"W4: the SPDL row is left out: {why}", flush=True)
    return [row for row in rows if row not in SPDL_VARIANTS]


def summarise(results: dict[str, list[dict]], workers: int, cores: int) -> list[dict]:
    rows = []
    for row, rounds in results.items():
        rates = [r for result in rounds for r in result["images_per_s"]]
        used = (
            min(cores, workers)
            if row.endswith(("workers", "threads"))
            else (cores if row.startswith("tfdata") and row != "tfdata-1thread" else 1)
        )
        name = row.replace("-workers", f" {workers} workers") if row.endswith("workers") else row
        name = name.replace("-threads", f" {workers} threads") if row in SPDL_VARIANTS else name
        rate = statistics.median(rates)
        rows.append(
            {
                "row": name,
                "key": row,
                "images_per_s": rate,
                "spread": (max(rates) - min(rates)) / rate,
                "passes": len(rates),
                "cores": used,
                "per_core": rate / used,
                "cpu_ms_per_image": 1000 * statistics.median(r["cpu_s_per_image"] for r in rounds),
                "first_batch_s": statistics.median(r["first_batch_s"] for r in rounds),
                "rss_main_mib": max(r["rss_main_mib"] for r in rounds),
                "pss_tree_mib": max((r["pss_tree_mib"] or 0) for r in rounds) or None,
                "load": statistics.median(r["load_at_start"] for r in rounds),
            }
        )
    return rows


def targets(rows: list[dict], host_rate: int = 6400) -> list[tuple[str, Any, bool | None]]:
    by = {r["key"]: r for r in rows}
    out: list[tuple[str, Any, bool | None]] = []
    best = by.get("tpufeed-workers")
    tf_rows = [r for key, r in by.items() if key.startswith("tfdata")]
    strongest = max(tf_rows, key=lambda r: r["images_per_s"]) if tf_rows else None
    if best and strongest:
        ratio = best["images_per_s"] / strongest["images_per_s"]
        out.append(
            (
                f"tpufeed N workers >= 1.2x tf.data's strongest ({strongest['row']})",
                ratio,
                ratio >= 1.2,
            )
        )
        cpu = strongest["cpu_ms_per_image"] / best["cpu_ms_per_image"]
        out.append(("  the same from CPU time per image", cpu, None))
    if best and "spdl-threads" in by:
        spdl = by["spdl-threads"]
        ratio = best["images_per_s"] / spdl["images_per_s"]
        out.append((f"tpufeed N workers / SPDL ({spdl['row']})", ratio, None))
        cpu = spdl["cpu_ms_per_image"] / best["cpu_ms_per_image"]
        out.append(("  the same from CPU time per image", cpu, None))
    if "tpufeed" in by and strongest:
        ratio = by["tpufeed"]["images_per_s"] / strongest["images_per_s"]
        out.append(
            ("tpufeed 0 workers >= 0.6x tf.data's strongest (all cores)", ratio, ratio >= 0.6)
        )
    if best and "pil-loop" in by:
        ratio = best["per_core"] / by["pil-loop"]["per_core"]
        out.append(("tpufeed per core (N workers) >= 1.5x the plain PIL loop", ratio, ratio >= 1.5))
        cpu = by["pil-loop"]["cpu_ms_per_image"] / best["cpu_ms_per_image"]
        out.append(
            ("  the same from CPU time per image (robust to a loaded machine)", cpu, cpu >= 1.5)
        )
        if "tpufeed" in by:
            ratio0 = by["tpufeed"]["images_per_s"] / by["pil-loop"]["images_per_s"]
            out.append(("  (tpufeed 0 workers / plain PIL loop, one core each)", ratio0, None))
    if best:
        out.append(
            (
                "tpufeed N workers first batch <= 0.5 s",
                best["first_batch_s"],
                best["first_batch_s"] <= 0.5,
            )
        )
        per_core = (
            min(best["per_core"], by["tpufeed"]["per_core"])
            if "tpufeed" in by
            else best["per_core"]
        )
        out.append(
            (
                f"cores for {host_rate:,} images/s per host (6,400: a v3-8 host at ResNet-50's "
                "published time to train, RESULTS.md; projected from the lower per-core rate)",
                math.ceil(host_rate / per_core),
                None,
            )
        )
        out.append(
            (
                "  (projected from the CPU time per image of the N-worker row)",
                math.ceil(host_rate * best["cpu_ms_per_image"] / 1000),
                None,
            )
        )
    return out


# -- cache(): decode and resize to 256 once, crop and flip every epoch (issue 32, item 4) ------


def _cached_w4(files: dict, directory: str | None, workers: int) -> Any:
    """W4 with a deterministic prefix (decode, shorter side to 256) before the random crop, so
    the crop works on pixels; `cache(directory)` after the prefix (None: no cache), 2 epochs."""
    import tpufeed
    from tpufeed.transforms import DecodeImage, Normalize, RandomFlip, RandomResizedCrop, Resize

    ds = (
        tpufeed.Dataset.from_array_record(files["array_record"])
        .shuffle(SEED)
        .map(tpufeed.codec.decode)
        .map(DecodeImage())
        .map(Resize(256))
    )
    if directory is not None:
        ds = ds.cache(directory, max_bytes=8 << 30)
    ds = ds.random_map(RandomResizedCrop(SIZE, SCALE, RATIO)).random_map(RandomFlip())
    return ds.map(Normalize(tuple(MEAN), tuple(STD))).batch(BATCH).repeat(2).workers(workers)


def _timed_epoch(it: Any, batches: int) -> tuple[float, float]:
    """(images/s, CPU ms per image) of the next `batches` batches of `it`."""
    cpu, started, seen = _cpu_s(), time.perf_counter(), 0
    for _ in range(batches):
        seen += len(next(it)["label"])
    return seen / (time.perf_counter() - started), 1000 * (_cpu_s() - cpu) / seen


def cache_rounds(files: dict, workers: int, rounds: int) -> list[dict]:
    """Per round, in a fresh cache: epochs 1 and 2 of the cached pipeline, and epoch 2 of the
    same pipeline without cache() (resumed from the cached run's state at the epoch's start,
    which it accepts: the fingerprints agree); then epoch 2 of both again, compared exactly."""
    _import("tpufeed")
    per_epoch = -(-files["images"] // BATCH)
    out = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            cached = _cached_w4(files, tmp, workers)
            it = cached.iterator()
            first, first_cpu = _timed_epoch(it, per_epoch)
            state = it.get_state()
            second, second_cpu = _timed_epoch(it, per_epoch)
            it.close()
            plain = _cached_w4(files, None, workers)
            it = plain.iterator(state)
            uncached, uncached_cpu = _timed_epoch(it, per_epoch)
            it.close()
            for a, b in zip(cached.iterator(state), plain.iterator(state), strict=True):
                if not (
                    np.array_equal(a["image"], b["image"])
                    and np.array_equal(a["label"], b["label"])
                ):
                    raise AssertionError("epoch 2 with cache() differs from epoch 2 without it")
        out.append(
            {
                "epoch1_images_per_s": first,
                "epoch2_images_per_s": second,
                "uncached_epoch2_images_per_s": uncached,
                "epoch1_cpu_ms_per_image": first_cpu,
                "epoch2_cpu_ms_per_image": second_cpu,
                "uncached_epoch2_cpu_ms_per_image": uncached_cpu,
                "load": os.getloadavg()[0],
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--rows",
        default=None,
        help=f"comma-separated, of {sorted(RUNNERS)} (default: {ROWS}, the SPDL row only where "
        "spdl is installed: bash benchmarks/setup_spdl.sh)",
    )
    p.add_argument("--images", type=int, default=2000, help="photographs per epoch")
    p.add_argument(
        "--image-set",
        default="imagenet",
        choices=sorted(IMAGE_SETS),
        help="which photographs (benchmarks/photos.py): 500x375 baseline/progressive, "
        "4:2:0/4:4:4, 1500x1000 large, or the legacy smooth set",
    )
    p.add_argument("--passes", type=int, default=3, help="timed epochs per row, after 1 warm-up")
    p.add_argument("--rounds", type=int, default=1, help="run every row this many times in turn")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument(
        "--host-rate",
        type=int,
        default=6400,
        help="images/s one host must feed, for the cores projection (default: a v3-8 host "
        "training ResNet-50 in the 302 minutes Google published in 2019, at 90 epochs; "
        "benchmarks/RESULTS.md)",
    )
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)  # run one row in this process
    p.add_argument(
        "--decoders",
        action="store_true",
        help="instead of the rows: CPU ms per image of each installed decoder, "
        "crop and resize included (W4_TF_DECODER=1 adds tf.io)",
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help="instead of the rows: epochs 1 and 2 with cache() after decode and resize to 256, "
        "and epoch 2 without it (asserted identical)",
    )
    args = p.parse_args(argv)
    if args.images < SHARDS or args.passes < 1 or args.rounds < 1 or args.workers < 1:
        p.error(f"need --images >= {SHARDS}, --passes, --rounds and --workers >= 1")
    files = prepare(args.data_dir, args.images, args.image_set)
    if args.decoders:
        from benchmarks.decoders import print_decoders

        print_decoders(files, args.rounds * args.passes)
        return 0
    if args.cache:
        print(
            "| round | epoch 1 images/s | epoch 2 | epoch 2 / 1 | uncached epoch 2 | "
            "CPU ms/image: epoch 1, 2, uncached 2 | load |\n|---|---|---|---|---|---|---|"
        )
        for i, r in enumerate(cache_rounds(files, args.workers, args.rounds)):
            ratio = r["epoch2_images_per_s"] / r["epoch1_images_per_s"]
            print(
                f"| {i + 1} | {r['epoch1_images_per_s']:,.0f} | {r['epoch2_images_per_s']:,.0f} | "
                f"{ratio:.2f} | {r['uncached_epoch2_images_per_s']:,.0f} | "
                f"{r['epoch1_cpu_ms_per_image']:.2f}, {r['epoch2_cpu_ms_per_image']:.2f}, "
                f"{r['uncached_epoch2_cpu_ms_per_image']:.2f} | {r['load']:.1f} |",
                flush=True,
            )
        return 0
    if args.row:
        result = measure(args.row, files, args.passes, args.workers)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return 0
    asked = args.rows is not None
    args.rows = [r.strip() for r in (args.rows or ",".join(ROWS)).split(",") if r.strip()]
    unknown = sorted(set(args.rows) - set(RUNNERS))
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {sorted(RUNNERS)}")
    args.rows = rows_here(args.rows, asked)
    cores = os.cpu_count() or 1
    print(
        f"W4: {files['images']:,} photographs ({args.image_set}: {describe(args.image_set)}, mean "
        f"{files['mean_bytes'] / 1e3:.0f} KB) -> random-resized-crop 224, flip, normalise, batch {BATCH}; {args.passes} passes x "
        f"{args.rounds} rounds, N = {args.workers}, {cores} cores",
        flush=True,
    )
    results: dict[str, list[dict]] = {row: [] for row in args.rows}
    for round_number in range(args.rounds):  # rounds interleave the rows against drift
        for row in args.rows:
            result = run_row(row, args)
            results[row].append(result)
            print(
                f" round {round_number + 1}: {row:<24} "
                f"{statistics.median(result['images_per_s']):>8,.0f} images/s  "
                f"(load {result['load_at_start']:.1f})",
                flush=True,
            )
    rows = summarise(results, args.workers, cores)
    print(
        "\n| row | images/s | spread | cores | per core | CPU ms/image | first batch s | "
        "peak RSS main MiB | peak PSS tree MiB | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pss = f"{r['pss_tree_mib']:,.0f}" if r["pss_tree_mib"] else "-"
        print(
            f"| {r['row']} | {r['images_per_s']:,.0f} | {r['spread']:.2f} | {r['cores']} | "
            f"{r['per_core']:,.0f} | {r['cpu_ms_per_image']:.2f} | {r['first_batch_s']:.2f} | "
            f"{r['rss_main_mib']:,.0f} | {pss} | {r['load']:.1f} |"
        )
    checks = targets(rows, args.host_rate)
    print("\ntargets (issues 17, 32):")
    for name, value, met in checks:
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        print(f"  {name}: {shown}" + ("" if met is None else (" met" if met else " NOT met")))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": "python -m benchmarks.vision " + " ".join(argv or sys.argv[1:]),
                    "cores": cores,
                    "rows": rows,
                    "rounds": results,
                    "targets": [{"target": t, "measured": v, "met": m} for t, v, m in checks],
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
