"""`tpufeed quickstart`: build a small real dataset on local disk, then train from it.

The data is scikit-learn's bundled handwritten digits (1,797 8x8 images, 10 classes), written
as ArrayRecord shards of tpufeed-encoded records. A softmax classifier is trained in numpy from
a shuffled, augmented, batched tpufeed pipeline; the run checks exactly-once delivery, resumes
from a mid-epoch checkpoint, and reports throughput and held-out accuracy.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from tpufeed import codec
from tpufeed.dataset import Dataset
from tpufeed.errors import MissingDependencyError

NUM_SHARDS = 4


def build(root: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """Writes the training split as ArrayRecord shards; returns the paths and the test split."""
    from tpufeed.sources.array_record import write_array_records
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise MissingDependencyError(
            "the quickstart uses scikit-learn's bundled digits; `pip install tpufeed[all]`") from None
    digits = load_digits()
    images = (digits.images * (255 / 16)).astype(np.uint8)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    test, train = order[:297], order[297:]
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard, part in enumerate(np.array_split(train, NUM_SHARDS)):
        path = root / f"digits-train-{shard:05d}-of-{NUM_SHARDS:05d}.array_record"
        write_array_records(str(path), (codec.encode({"image": images[i], "label": labels[i],
                                                      "id": int(i)}) for i in part))
        paths.append(str(path))
    return paths, {"image": images[test], "label": labels[test]}


def augment(element: dict, rng: np.random.Generator) -> dict:
    """Shift the digit by up to one pixel; the shift depends only on (seed, epoch, record)."""
    dy, dx = rng.integers(-1, 2, size=2)
    image = np.roll(element["image"], (int(dy), int(dx)), axis=(0, 1))
    return {"image": image, "label": element["label"], "id": element["id"]}


def features(images: np.ndarray) -> np.ndarray:
    x = images.reshape(len(images), -1).astype(np.float32) / 255.0
    return np.concatenate([x, np.ones((len(x), 1), np.float32)], axis=1)


def make_dataset(paths: list[str], epochs: int) -> Dataset:
    return (Dataset.from_array_record(paths).shuffle(seed=0).map(codec.decode)
            .random_map(augment).batch(64).repeat(epochs).prefetch(2))


def run(root: str = "tpufeed-quickstart", epochs: int = 20) -> dict:
    from tqdm import tqdm

    started = time.perf_counter()
    paths, test = build(Path(root))
    ds = make_dataset(paths, epochs)
    weights = np.zeros((65, 10), np.float32)
    seen_per_epoch: dict[int, list[int]] = {}
    checkpoint = None
    records = 0
    wait = 0.0
    it = ds.iterator()
    t0 = time.perf_counter()
    with tqdm(total=epochs * (len(ds.source) + 63) // 64, desc="training", unit="batch") as bar:
        while True:
            t_wait = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - t_wait
            epoch = it.get_state()["epoch"]
            seen_per_epoch.setdefault(epoch, []).extend(batch["id"].tolist())
            x, y = features(batch["image"]), batch["label"]
            logits = x @ weights
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(y)), y] -= 1.0
            weights -= 0.5 * (x.T @ p) / len(y)
            records += len(y)
            bar.update(1)
            if epoch == 1 and checkpoint is None:
                checkpoint = (json.dumps(it.get_state()), next(it)["id"].tolist())
                seen_per_epoch[epoch].extend(checkpoint[1])
                records += len(checkpoint[1])
                bar.update(1)
    elapsed = time.perf_counter() - t0
    exactly_once = all(sorted(ids) == sorted(set(ids)) and len(ids) == len(ds.source)
                       for ids in seen_per_epoch.values())
    resumed = next(ds.iterator(json.loads(checkpoint[0])))["id"].tolist() if checkpoint else []
    accuracy = float(np.mean((features(test["image"]) @ weights).argmax(axis=1) == test["label"]))
    return {
        "dataset": os.path.abspath(root),
        "shards": len(paths),
        "train_records": len(ds.source),
        "epochs": len(seen_per_epoch),
        "records_per_s": records / elapsed,
        "input_wait_fraction": wait / elapsed,
        "exactly_once_every_epoch": exactly_once,
        "resume_matches": resumed == (checkpoint[1] if checkpoint else []),
        "test_accuracy": accuracy,
        "seconds": time.perf_counter() - started,
    }
