"""Dataset.from_tfds on datasets that TFDS itself prepares here (tests/sources/tfds_builders.py),
compared record for record with `tfds.data_source` (ArrayRecord) and `tfds.load` (TFRecord),
split slices included; the pipeline's shuffle, hosts, workers and resume over it; gs:// through
the emulator; and each refusal, by name."""

import json
import os
import shutil

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.sources.tfds.source import TFDSSource

from .tfds_builders import TEST, TRAIN, VALIDATION, TpufeedImages, TpufeedTiny, prepare, tfds

SLICES = [
    "train",
    "train[:50%]",
    "train[10:20]",
    "train[:10%]+test",
    "train[-7:]",
    "train[33%:67%]",
    "train[1shard]",
    "train[-1shard:]+validation",
    "all",
    "test[2:]+train[:3]",
]
FOLDER = "tpufeed_tiny/1.0.0"


@pytest.fixture(scope="module")
def array_record_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds-array-record")
    prepare(TpufeedTiny, data_dir, "array_record")
    return data_dir


@pytest.fixture(scope="module")
def tfrecord_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds-tfrecord")
    prepare(TpufeedTiny, data_dir, "tfrecord")
    return data_dir


@pytest.fixture
def copy_of(array_record_dir, tmp_path):
    """A copy of the ArrayRecord dataset's folder to damage; returns (data_dir, folder)."""
    shutil.copytree(array_record_dir, tmp_path / "data")
    return tmp_path / "data", tmp_path / "data" / FOLDER


def same(a, b, dtypes):
    """Elements equal: dicts of arrays, scalars, bytes; of the same dtypes if `dtypes` (the
    data source leaves Python ints, floats and lists where tfds.load gives numpy values)."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            same(a[key], b[key], dtypes)
            continue
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.shape == y.shape and (x == y).all(), (key, a, b)
        assert x.dtype == y.dtype or not dtypes, (key, a, b)


def assert_same_records(ours, theirs, dtypes=True):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        same(a, b, dtypes)


@pytest.mark.parametrize("split", SLICES)
def test_records_are_the_data_sources_in_its_order(array_record_dir, split):
    ds = tpufeed.Dataset.from_tfds("tpufeed_tiny", split=split, data_dir=array_record_dir)
    source = tfds.data_source("tpufeed_tiny", split=split, data_dir=str(array_record_dir))
    assert len(ds.source) == len(source)
    assert_same_records(list(ds), [source[i] for i in range(len(source))], dtypes=False)


def test_values_have_the_features_dtypes(array_record_dir):
    """Where the data source leaves a Python int, float or list, the feature's dtype: a
    float32 Scalar stays float32 in a batch, an empty sequence is int64 (as tfds.load)."""
    ds = tpufeed.Dataset.from_tfds("tpufeed_tiny", "train", data_dir=array_record_dir)
    for element in ds:
        assert element["label"].dtype == np.int64 and element["weight"].dtype == np.float32
        assert element["tokens"].dtype == np.int64 and isinstance(element["text"], bytes)
    batch = next(iter(ds.map(lambda e: {"w": e["weight"], "y": e["label"]}).batch(4)))
    assert batch["w"].dtype == np.float32 and batch["y"].dtype == np.int64


def test_every_record_of_every_split_once(array_record_dir):
    ds = tpufeed.Dataset.from_tfds("tpufeed_tiny", split="all", data_dir=array_record_dir)
    texts = sorted(e["text"].decode() for e in ds)
    ids = list(range(TRAIN)) + list(range(1000, 1000 + TEST)) + list(range(2000, 2000 + VALIDATION))
    assert texts == sorted(f"record {i}" for i in ids)
    first = next(iter(ds))
    assert first["image"].dtype == np.uint8 and first["image"].shape == (2, 3)


IMAGES_WITHOUT_TENSORFLOW = """
import sys
import numpy as np
import tpufeed
ds = tpufeed.Dataset.from_tfds("tpufeed_images", "train", data_dir=sys.argv[1])
batch = next(iter(ds.map(lambda e: {"png": e["png"], "jpeg": e["jpeg"]}).batch(4)))
assert batch["png"].shape == (4, 8, 8, 3) and batch["jpeg"].dtype == np.uint8
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
"""


@pytest.mark.slow
def test_image_datasets_decode_as_the_data_source_and_without_tensorflow(tmp_path):
    """PNG and JPEG images, boxes and a sequence of objects, as tfds.data_source gives them;
    in a process of its own, nothing imports TensorFlow."""
    import subprocess
    import sys

    prepare(TpufeedImages, tmp_path, "array_record", shards=2)
    ours = list(tpufeed.Dataset.from_tfds("tpufeed_images", "train", data_dir=tmp_path))
    source = tfds.data_source("tpufeed_images", split="train", data_dir=str(tmp_path))
    assert_same_records(ours, [source[i] for i in range(len(source))], dtypes=False)
    assert ours[2]["objects"]["label"].dtype == np.int64 and ours[0]["bbox"].dtype == np.float32
    script = [sys.executable, "-c", IMAGES_WITHOUT_TENSORFLOW, str(tmp_path)]
    done = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "train[:50%]", "train[10:20]", "train[:10%]+test"])
def test_tfrecord_records_are_tfds_loads(tfrecord_dir, array_record_dir, split):
    """TFRecord files, which tfds.data_source refuses: the records tfds.load gives unshuffled,
    and the ArrayRecord dataset's, in the same order."""
    ours = list(tpufeed.Dataset.from_tfds("tpufeed_tiny", split=split, data_dir=tfrecord_dir))
    loaded = tfds.load("tpufeed_tiny", split=split, data_dir=str(tfrecord_dir), shuffle_files=False)
    assert_same_records(ours, list(tfds.as_numpy(loaded)))
    assert_same_records(
        ours,
        list(tpufeed.Dataset.from_tfds("tpufeed_tiny", split=split, data_dir=array_record_dir)),
    )


def text_ids(element):
    return int(element["text"].split()[-1])


@pytest.mark.parametrize("hosts", [1, 2, 3])
def test_shuffled_on_hosts_exactly_once_and_resumed_at_every_step(array_record_dir, hosts):
    def pipeline(host):
        return (
            tpufeed.Dataset.from_tfds("tpufeed_tiny", "train[:80%]", data_dir=array_record_dir)
            .shuffle(seed=4)
            .shard(host, hosts)
            .map(text_ids)
            .batch(3)
        )

    seen = []
    for host in range(hosts):
        ds = pipeline(host)
        full = [b.tolist() for b in ds]
        seen += [i for b in full for i in b]
        it = ds.iterator()
        for step in range(len(full)):
            state = json.loads(json.dumps(it.get_state()))
            assert [b.tolist() for b in ds.iterator(state)] == full[step:]
            next(it)
    source = tfds.data_source("tpufeed_tiny", split="train[:80%]", data_dir=str(array_record_dir))
    assert sorted(seen) == sorted(text_ids(source[i]) for i in range(len(source)))
    assert len(seen) == round(0.8 * TRAIN)


@pytest.mark.multiprocess
def test_workers_give_what_the_process_gives(array_record_dir):
    ds = (
        tpufeed.Dataset.from_tfds("tpufeed_tiny", "train+test", data_dir=array_record_dir)
        .shuffle(seed=1)
        .map(lambda e: {"id": text_ids(e), "image": e["image"]})
        .batch(4)
    )
    alone = [b["id"].tolist() for b in ds]
    assert [b["id"].tolist() for b in ds.workers(2)] == alone


@pytest.mark.emulator
def test_a_gcs_data_dir_reads_like_the_local_one(gcs, bucket, upload, array_record_dir):
    for path in sorted((array_record_dir / FOLDER).iterdir()):
        upload(bucket, f"tfds/{FOLDER}/{path.name}", str(path))
    url = f"gs://{bucket}/tfds"
    for split in ("train[:50%]+test", "all"):
        remote = tpufeed.Dataset.from_tfds("tpufeed_tiny", split, data_dir=url)
        local = tpufeed.Dataset.from_tfds("tpufeed_tiny", split, data_dir=array_record_dir)
        assert_same_records(list(remote.shuffle(seed=2)), list(local.shuffle(seed=2)))
    assert remote.source.locate(0)[0].startswith(f"{url}/{FOLDER}/")
    with pytest.raises(InvalidArgumentError, match="need a shard cache"):
        tpufeed.Dataset.from_tfds("tpufeed_tiny", "test", data_dir=url, cache_bytes=0)


@pytest.mark.slow
@pytest.mark.emulator
def test_tfrecord_files_on_gcs_by_ranges_or_copies(gcs, bucket, upload, tfrecord_dir):
    for path in sorted((tfrecord_dir / FOLDER).iterdir()):
        if path.name.endswith(".tpufeed-index"):
            continue  # an offset index tpufeed keeps beside a local file
        upload(bucket, f"tfds/{FOLDER}/{path.name}", str(path))
    local = list(tpufeed.Dataset.from_tfds("tpufeed_tiny", "all", data_dir=tfrecord_dir))
    for cache_bytes in (None, 0):
        remote = tpufeed.Dataset.from_tfds(
            "tpufeed_tiny", "all", data_dir=f"gs://{bucket}/tfds", cache_bytes=cache_bytes
        )
        assert_same_records(list(remote), local)


@pytest.mark.emulator
def test_an_s3_data_dir_reads_like_the_local_one(s3, s3_bucket, s3_upload, array_record_dir):
    for path in sorted((array_record_dir / FOLDER).iterdir()):
        s3_upload(s3_bucket, f"tfds/{FOLDER}/{path.name}", str(path))
    remote = tpufeed.Dataset.from_tfds(
        "tpufeed_tiny", "validation+train[:5]", f"s3://{s3_bucket}/tfds"
    )
    local = tpufeed.Dataset.from_tfds("tpufeed_tiny", "validation+train[:5]", array_record_dir)
    assert_same_records(list(remote.shuffle(seed=3)), list(local.shuffle(seed=3)))


def test_the_newest_version_unless_one_is_named(copy_of):
    data_dir, folder = copy_of
    shutil.copytree(folder, folder.parent / "1.1.0")
    newest = TFDSSource("tpufeed_tiny", "test", data_dir)
    assert "/1.1.0/" in newest.locate(0)[0]
    for name in ("tpufeed_tiny:1.0.0", "tpufeed_tiny:1.0.*"):
        assert "/1.0.0/" in TFDSSource(name, "test", data_dir).locate(0)[0]
    with pytest.raises(SourceNotFoundError, match=r"holds versions \['1.0.0', '1.1.0'\]"):
        TFDSSource("tpufeed_tiny:2.0.0", "test", data_dir)
    with pytest.raises(SourceNotFoundError, match="not prepared"):
        TFDSSource("mnist", "test", data_dir)
    with pytest.raises(InvalidArgumentError, match="not a TFDS name"):
        TFDSSource("tpufeed tiny", "test", data_dir)
    with pytest.raises(InvalidArgumentError, match="names no config"):
        TFDSSource("tpufeed_tiny/..", "test", data_dir)


def test_configs_by_name_or_the_default_tfds_recorded(copy_of, tmp_path):
    data_dir, folder = copy_of
    configs = tmp_path / "configs"
    for config in ("small", "large"):
        shutil.copytree(folder, configs / "tpufeed_tiny" / config / "1.0.0")
    with pytest.raises(InvalidArgumentError, match=r"has configs \['large', 'small'\]"):
        TFDSSource("tpufeed_tiny", "test", configs)
    assert "/large/1.0.0/" in TFDSSource("tpufeed_tiny/large", "test", configs).locate(0)[0]
    (configs / "tpufeed_tiny" / ".config").mkdir()
    (configs / "tpufeed_tiny" / ".config" / "metadata.json").write_text(
        json.dumps({"default_config_name": "small"})
    )
    assert "/small/1.0.0/" in TFDSSource("tpufeed_tiny", "test", configs).locate(0)[0]


def edit_info(folder, change):
    path = folder / "dataset_info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info))


def test_a_missing_or_cut_shard_is_refused_by_name(copy_of):
    data_dir, folder = copy_of
    shard = folder / "tpufeed_tiny-test.array_record-00001-of-00003"
    shard.unlink()
    with pytest.raises(SourceNotFoundError, match="test.array_record-00001-of-00003"):
        TFDSSource("tpufeed_tiny", "test", data_dir)
    TFDSSource("tpufeed_tiny", "test[2shard:]+train", data_dir)  # not read: not opened
    shutil.copy(folder / "tpufeed_tiny-test.array_record-00000-of-00003", shard)
    with pytest.raises(CorruptDataError, match=r"00001-of-00003: \d+ records, where .* says"):
        TFDSSource("tpufeed_tiny", "test", data_dir)


@pytest.mark.slow
def test_array_record_files_beside_tfrecord_ones_are_read(copy_of, tfrecord_dir):
    """A dataset prepared in both formats (TFDS's alternativeFileFormats, as its format
    conversion leaves it) is read from its ArrayRecord files, as tfds.data_source reads it."""
    data_dir, folder = copy_of
    for path in (tfrecord_dir / FOLDER).glob("*.tfrecord-*"):
        shutil.copy(path, folder)
    edit_info(
        folder, lambda i: i.update(fileFormat="tfrecord", alternativeFileFormats=["array_record"])
    )
    source = TFDSSource("tpufeed_tiny", "train", data_dir)
    assert ".array_record-" in source.locate(0)[0]
    edit_info(folder, lambda i: i.update(fileFormat="riegeli", alternativeFileFormats=["tfrecord"]))
    assert ".tfrecord-" in TFDSSource("tpufeed_tiny", "train", data_dir).locate(0)[0]


def test_a_split_it_does_not_have_names_those_it_has(array_record_dir):
    with pytest.raises(InvalidArgumentError, match=r"no split 'dev'; it has \['train', 'test'"):
        tpufeed.Dataset.from_tfds("tpufeed_tiny", "dev", data_dir=array_record_dir)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda i: i.update(fileFormat="riegeli"), InvalidArgumentError, "prepared as 'riegeli';"),
        (lambda i: i.pop("splits"), CorruptDataError, "the dataset's name and splits"),
        (
            lambda i: i["splits"][0].update(shardLengths=["x"]),
            CorruptDataError,
            "a split: ValueError",
        ),
        (
            lambda i: i["splits"][0].update(filepathTemplate="{SPLIT}/../../x-{SHARD_INDEX}"),
            CorruptDataError,
            "outside|\\.\\.",
        ),
        (
            lambda i: i["splits"][0].update(filepathTemplate="{DATASET.__class__}"),
            CorruptDataError,
            "file name template",
        ),
    ],
)
def test_bad_metadata_is_refused_naming_the_file(copy_of, change, error, message):
    data_dir, folder = copy_of
    edit_info(folder, change)
    with pytest.raises(error, match=message) as raised:
        TFDSSource("tpufeed_tiny", "train", data_dir)
    assert "dataset_info.json" in str(raised.value)


def test_metadata_that_is_not_json_or_too_large_is_refused(copy_of):
    data_dir, folder = copy_of
    (folder / "dataset_info.json").write_bytes(b'{"splits": [')
    with pytest.raises(CorruptDataError, match=r"dataset_info.json: its JSON: JSONDecodeError"):
        TFDSSource("tpufeed_tiny", "train", data_dir)
    with open(folder / "dataset_info.json", "wb") as f:
        f.truncate((64 << 20) + 1)
    with pytest.raises(SourceError, match="larger than 67,108,864 bytes"):
        TFDSSource("tpufeed_tiny", "train", data_dir)


def test_a_feature_class_that_is_not_loaded_is_not_imported(copy_of):
    data_dir, folder = copy_of
    features = json.loads((folder / "features.json").read_text())
    label = features["featuresDict"]["features"]["label"]
    label["pythonClassName"] = "os.system_feature.Feature"
    (folder / "features.json").write_text(json.dumps(features))
    with pytest.raises(InvalidArgumentError, match="os.system_feature.Feature.*imports no module"):
        TFDSSource("tpufeed_tiny", "train", data_dir)


def test_a_record_that_does_not_decode_names_file_and_record(copy_of, tmp_path):
    from tpufeed.sources.array_record import write_array_records

    data_dir, folder = copy_of
    shard = folder / "tpufeed_tiny-test.array_record-00000-of-00003"
    count = len(tpufeed.Dataset.from_array_record(str(shard)).source)
    records = [b"\x0a\xff\xff\xff"] * count  # a field whose length runs past the record
    shard.unlink()
    write_array_records(str(shard), records)
    ds = tpufeed.Dataset.from_tfds("tpufeed_tiny", "test", data_dir=data_dir)
    with pytest.raises(CorruptDataError, match=r"00000-of-00003 record 0: not an example"):
        next(iter(ds))


def test_a_shard_linked_from_outside_the_folder_is_refused(copy_of, tmp_path):
    data_dir, folder = copy_of
    shard = folder / "tpufeed_tiny-test.array_record-00002-of-00003"
    outside = tmp_path / "elsewhere"
    shutil.move(shard, outside)
    os.symlink(outside, shard)
    with pytest.raises(CorruptDataError, match="outside"):
        list(tpufeed.Dataset.from_tfds("tpufeed_tiny", "test", data_dir=data_dir))
