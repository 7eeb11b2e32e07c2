"""Small datasets that TFDS itself prepares, offline, for the from_tfds tests: its own builder
(`GeneratorBasedBuilder`) and `download_and_prepare`, in either file format."""

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

TRAIN, TEST, VALIDATION = 37, 11, 5
SHARDS = 3


def example(i):
    """Record i of the tiny dataset: each feature kind a dataset has (tensor, class label,
    text, a variable-length sequence, a scalar)."""
    return {
        "image": np.full((2, 3), i % 256, np.uint8),
        "label": i % 5,
        "text": f"record {i}",
        "tokens": list(range(i % 4)),
        "weight": np.float32(i / 4),
    }


class TpufeedTiny(tfds.core.GeneratorBasedBuilder):
    """train, test and validation splits, shuffled as TFDS shuffles them when it writes."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(2, 3), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=5),
                    "text": tfds.features.Text(),
                    "tokens": tfds.features.Sequence(np.int64),
                    "weight": tfds.features.Scalar(dtype=np.float32),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(0, TRAIN),
            "test": self._generate_examples(1000, 1000 + TEST),
            "validation": self._generate_examples(2000, 2000 + VALIDATION),
        }

    def _generate_examples(self, low, high):
        for i in range(low, high):
            yield i, example(i)


class TpufeedRecords(tfds.core.GeneratorBasedBuilder):
    """Given records as a bytes feature, kept in order (`disable_shuffling`): the conformance
    suite's records, record i at index i."""

    VERSION = tfds.core.Version("1.0.0")
    RECORDS: list = []

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"record": tfds.features.Tensor(shape=(), dtype=np.object_)}
            ),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i, record in enumerate(self.RECORDS):
            yield i, {"record": record}


class TpufeedImages(tfds.core.GeneratorBasedBuilder):
    """The feature kinds of image datasets: PNG and JPEG `Image`s, a `BBoxFeature`, and a
    `Sequence` of a dict (detection datasets' objects)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        objects = {"label": tfds.features.ClassLabel(num_classes=3), "area": np.float32}
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "png": tfds.features.Image(shape=(8, 8, 3)),
                    "jpeg": tfds.features.Image(shape=(8, 8, 3), encoding_format="jpeg"),
                    "bbox": tfds.features.BBoxFeature(),
                    "objects": tfds.features.Sequence(objects),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        rng = np.random.default_rng(0)
        for i in range(20):
            yield (
                i,
                {
                    "png": rng.integers(0, 256, (8, 8, 3), np.uint8),
                    "jpeg": rng.integers(0, 256, (8, 8, 3), np.uint8),
                    "bbox": tfds.features.BBox(0.1, 0.2, 0.5, i / 40 + 0.5),
                    "objects": {
                        "label": [j % 3 for j in range(i % 3)],
                        "area": [j / 2 for j in range(i % 3)],
                    },
                },
            )


def prepare(builder_class, data_dir, file_format, shards=SHARDS, **config):
    """`builder_class` prepared by TFDS under `data_dir` as `file_format`, in `shards` shards
    per split; returns the builder."""
    tfds.disable_progress_bar()
    builder = builder_class(data_dir=str(data_dir), file_format=file_format, **config)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=shards))
    return builder
