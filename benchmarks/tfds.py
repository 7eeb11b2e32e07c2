"""Dataset.from_tfds beside TFDS's own readers, on one dataset TFDS prepares in both formats,
side by side in one run (rounds pooled: median and best; the order rotated each round).

    python -m benchmarks.tfds [--records 20000] [--rounds 3] [--json F]

The dataset: `--records` examples of a 32x32x3 uint8 image and a class label, prepared by
TFDS's own builder and `download_and_prepare` as ArrayRecord and as TFRecord (8 shards each).
Every row reads one epoch in a random order of every record, batches of 256, in this process
(no worker processes), decoding each record with the dataset's features:

  data_source          tfds.data_source (ArrayRecord), __getitems__ over a permutation in
                       chunks of 256, stacked with np.stack: the floor a Grain user starts from
  by hand              from_array_record over the shard files, .map(deserialize_example_np):
                       what a user wrote before from_tfds
  from_tfds ar         Dataset.from_tfds on the ArrayRecord files, shuffle, batch
  from_tfds tfrecord   the same on the TFRecord files (offset indexes made before the rounds)
  tfds.load            tfds.load on the TFRecord files (shuffle_files, a 10,000-record
                       shuffle buffer), batch, as_numpy: TFDS's own tf.data pipeline

"first s" is the time to the first batch (building the dataset included), "rec/s" the epoch's
records over its time from the first `next`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tpufeed  # noqa: E402

BATCH = 256
SHARDS = 8
ROWS = ["data_source", "by hand", "from_tfds ar", "from_tfds tfrecord", "tfds.load"]


def prepare(data_dir: str, records: int) -> None:
    """The benchmark's dataset, prepared by TFDS in both formats under data_dir/<format>."""
    import tensorflow_datasets as tfds

    class TpufeedBenchImages(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> Any:
            features = tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(32, 32, 3), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            )
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager: Any) -> Any:
            return {"train": self._generate_examples()}

        def _generate_examples(self) -> Iterator[tuple[int, dict[str, Any]]]:
            rng = np.random.default_rng(0)
            for i in range(records):
                yield i, {"image": rng.integers(0, 256, (32, 32, 3), np.uint8), "label": i % 10}

    tfds.disable_progress_bar()
    for file_format in ("array_record", "tfrecord"):
        builder = TpufeedBenchImages(
            data_dir=os.path.join(data_dir, file_format), file_format=file_format
        )
        config = tfds.download.DownloadConfig(num_shards=SHARDS)
        builder.download_and_prepare(download_config=config)


def _data_source(data_dir: str) -> Iterator[Any]:
    import tensorflow_datasets as tfds

    source = tfds.data_source("tpufeed_bench_images", split="train", data_dir=data_dir)
    order = np.random.default_rng(0).permutation(len(source))
    for start in range(0, len(order), BATCH):
        rows = source.__getitems__(order[start : start + BATCH].tolist())
        yield {key: np.stack([np.asarray(r[key]) for r in rows]) for key in rows[0]}


def _by_hand(data_dir: str) -> Iterator[Any]:
    import tensorflow_datasets as tfds

    folder = os.path.join(data_dir, "tpufeed_bench_images", "1.0.0")
    features = tfds.builder_from_directory(folder).info.features
    files = os.path.join(folder, "tpufeed_bench_images-train.array_record-*")
    ds = tpufeed.Dataset.from_array_record(files).shuffle(seed=0)
    return iter(ds.map(features.deserialize_example_np).batch(BATCH))


def _from_tfds(data_dir: str) -> Iterator[Any]:
    ds = tpufeed.Dataset.from_tfds("tpufeed_bench_images", "train", data_dir=data_dir)
    return iter(ds.shuffle(seed=0).batch(BATCH))


def _tfds_load(data_dir: str) -> Iterator[Any]:
    import tensorflow_datasets as tfds

    ds = tfds.load("tpufeed_bench_images", split="train", data_dir=data_dir, shuffle_files=True)
    return iter(tfds.as_numpy(ds.shuffle(10_000, seed=0).batch(BATCH)))


def readers(data_dir: str) -> dict[str, Callable[[], Iterator[Any]]]:
    ar, tfr = os.path.join(data_dir, "array_record"), os.path.join(data_dir, "tfrecord")
    return {
        "data_source": lambda: _data_source(ar),
        "by hand": lambda: _by_hand(ar),
        "from_tfds ar": lambda: _from_tfds(ar),
        "from_tfds tfrecord": lambda: _from_tfds(tfr),
        "tfds.load": lambda: _tfds_load(tfr),
    }


def _epoch(make: Callable[[], Iterator[Any]]) -> tuple[float, float, int]:
    """(seconds to the first batch, seconds of the epoch from it, records) of one epoch."""
    start = time.perf_counter()
    batches = make()
    count = len(next(batches)["label"])
    first = time.perf_counter()
    count += sum(len(batch["label"]) for batch in batches)
    return first - start, time.perf_counter() - first, count


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    data_dir = tempfile.mkdtemp(prefix="tpufeed-bench-tfds-")
    try:
        prepare(data_dir, args.records)
        rows = readers(data_dir)
        _epoch(rows["from_tfds tfrecord"])  # the TFRecord offset indexes, made once
        first: dict[str, list[float]] = {row: [] for row in ROWS}
        rates: dict[str, list[float]] = {row: [] for row in ROWS}
        for round_ in range(args.rounds):
            for row in ROWS[round_ % len(ROWS) :] + ROWS[: round_ % len(ROWS)]:
                to_first, epoch_s, count = _epoch(rows[row])
                if count != args.records:
                    raise SystemExit(f"{row} read {count} records, not {args.records}")
                first[row].append(to_first)
                rates[row].append(count / epoch_s)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"{args.records:,} records, {args.rounds} rounds; median (best)")
    print(f"{'row':<20} {'rec/s':>18} {'first s':>16}")
    for row in ROWS:
        rate = f"{statistics.median(rates[row]):,.0f} ({max(rates[row]):,.0f})"
        to_first = f"{statistics.median(first[row]):.3f} ({min(first[row]):.3f})"
        print(f"{row:<20} {rate:>18} {to_first:>16}")
    result = {"records": args.records, "rounds": args.rounds, "rate": rates, "first_s": first}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
