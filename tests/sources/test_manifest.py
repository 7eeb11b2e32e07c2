"""ManifestSource / Dataset.open: decoded records, lazy and eager verification, safe paths."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import tpufeed
from tests.dataset_folder import make_dataset, write_manifest
from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceNotFoundError, TpufeedError
from tpufeed.sources.built.manifest import FORMAT_VERSION, ManifestSource, load_manifest


def _records(n: int, start: int = 0) -> list[dict]:
    return [
        {"x": np.arange(i % 4, dtype=np.int32), "label": i, "name": f"r{i}"}
        for i in range(start, start + n)
    ]


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root, [_records(5), _records(4, start=5), _records(6, start=9)])
    return root


def _flip_byte(path, offset: int = 100) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("file_format", ["array_record", "tfrecord"])
def test_open_reads_decoded_records_in_shard_order(tmp_path, file_format):
    root = tmp_path / "ds"
    make_dataset(root, [_records(3), _records(2, start=3)], file_format)
    for path in (root, root / "manifest.json"):
        ds = tpufeed.Dataset.open(path)
        assert len(ds.source) == 5
        got = [ds.source[i] for i in range(5)]
        assert [r["label"] for r in got] == list(range(5))
        np.testing.assert_array_equal(got[3]["x"], np.arange(3, dtype=np.int32))
        assert ds.schema["x"]["shape"] == [None] and ds.schema["name"]["type"] == "str"
    assert ds.source.manifest["file_format"] == file_format


def test_dataset_pipeline_over_a_built_dataset(dataset):
    ds = tpufeed.Dataset.open(dataset, verify=True).shuffle(seed=3).map(lambda r: r["label"])
    assert sorted(ds) == list(range(15))
    assert ds.source.statistics.num_records == 15


def test_raw_bytes_datasets_return_bytes(tmp_path):
    make_dataset(tmp_path, [[b"a", b"bc"], [b"def"]])
    source = ManifestSource(tmp_path)
    assert source.schema is None
    assert source.__getitems__([2, 0]) == [b"def", b"a"]


def test_corruption_is_found_on_the_shards_first_read(dataset):
    _flip_byte(dataset / "data-00001-of-00003.array_record")  # in record 0's chunk
    source = ManifestSource(dataset)  # lazy: opening checks nothing yet
    assert source[0]["label"] == 0 and source[14]["label"] == 14
    with pytest.raises(CorruptDataError, match=r"data-00001-of-00003\.array_record record 0 "):
        source[5]
    assert source[6]["label"] == 6  # the damaged chunk alone is lost (test_damaged_shards.py)
    with pytest.raises(CorruptDataError, match="CRC32C"):
        ManifestSource(dataset, verify=True)
    with pytest.raises(CorruptDataError, match="CRC32C"):
        tpufeed.Dataset.open(dataset, verify=True)


def test_truncated_and_missing_shards(dataset):
    path = dataset / "data-00002-of-00003.array_record"
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)
    with pytest.raises(CorruptDataError, match=r"data-00002.*bytes, the manifest says"):
        ManifestSource(dataset, verify=True)
    os.remove(path)
    with pytest.raises(SourceNotFoundError, match=r"data-00002.*missing"):
        ManifestSource(dataset)[10]


def test_record_count_disagreeing_with_the_file(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["shards"][0]["num_records"] = 4
    manifest["num_records"] = 14
    write_manifest(dataset, manifest)
    source = ManifestSource(dataset)
    assert len(source) == 14
    with pytest.raises(CorruptDataError, match=r"holds 5 records, the manifest says 4"):
        source[0]


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "../outside.array_record",
        "sub/../../outside.array_record",
        "a\\..\\b",
        "",
        "gs://bucket/x",
        "sub//x",
        7,
    ],
)
def test_paths_escaping_the_root_are_refused(dataset, name):
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["shards"][1]["path"] = name
    write_manifest(dataset, manifest)
    with pytest.raises(CorruptDataError, match="shard path") as info:
        ManifestSource(dataset)
    assert repr(name) in str(info.value) and "manifest.json" in str(info.value)


def test_symlinks_out_of_the_root_are_refused_and_inside_allowed(dataset, tmp_path):
    outside = tmp_path / "elsewhere.array_record"
    os.rename(dataset / "data-00000-of-00003.array_record", outside)
    os.symlink(outside, dataset / "data-00000-of-00003.array_record")
    with pytest.raises(CorruptDataError, match="symlink"):
        ManifestSource(dataset)
    os.remove(dataset / "data-00000-of-00003.array_record")
    os.makedirs(dataset / "real")
    os.rename(outside, dataset / "real" / "shard0")
    os.symlink("real/shard0", dataset / "data-00000-of-00003.array_record")
    assert ManifestSource(dataset, verify=True)[0]["label"] == 0


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda m: m.update(format="other"), "'format'"),
        (lambda m: m.update(format_version=FORMAT_VERSION + 1), "newer tpufeed"),
        (lambda m: m.update(file_format="parquet"), "'file_format'"),
        (lambda m: m.update(record_format="pickle"), "'record_format'"),
        (lambda m: m.update(shards=[]), "'shards'"),
        (lambda m: m["shards"][0].update(crc32c="xyz"), r"shards\[0\].crc32c"),
        (lambda m: m["shards"][2].update(num_records=-1), r"shards\[2\].num_records"),
        (lambda m: m.update(num_records=99), "'num_records'"),
        (lambda m: m["shards"][1].update(path=m["shards"][0]["path"]), "same file twice"),
        (lambda m: m["shards"][1].update(path="./" + m["shards"][0]["path"]), "same file twice"),
        (lambda m: m["shards"][1].pop("path"), r"shards\[1\].path is missing"),
        (lambda m: m.update(build={"deep": json.loads("[" * 900 + "]" * 900)}), "nested more than"),
    ],
)
def test_malformed_manifests_name_the_field(dataset, change, match):
    manifest = json.loads((dataset / "manifest.json").read_text())
    change(manifest)
    write_manifest(dataset, manifest)
    with pytest.raises(CorruptDataError, match=match):
        ManifestSource(dataset)


def test_unreadable_or_absent_manifests(tmp_path):
    with pytest.raises(SourceNotFoundError, match="did not finish"):
        ManifestSource(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptDataError, match="not valid JSON"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(TpufeedError, match="JSON object"):
        load_manifest(tmp_path / "manifest.json")
    with pytest.raises(InvalidArgumentError, match="hdfs://bucket/ds.*gs://, s3://"):
        ManifestSource(
            "hdfs://bucket/ds"
        )  # gs://, s3:// datasets: test_manifest_gcs, test_s3_dataset


def test_pickled_sources_remember_verification(dataset):
    source = ManifestSource(dataset, verify=True)
    source[0]
    copy = pickle.loads(pickle.dumps(source))
    assert all(shard.verified for shard in copy.files)
    assert copy[7]["label"] == 7
    unverified = pickle.loads(pickle.dumps(ManifestSource(dataset)))
    assert not any(shard.verified for shard in unverified.files)
    assert unverified[7]["label"] == 7 and unverified.files[1].verified


def test_fingerprint_changes_with_the_content(dataset, tmp_path):
    other = tmp_path / "other"
    make_dataset(other, [_records(5), _records(4, start=5), _records(6, start=10)])
    assert ManifestSource(dataset).fingerprint() != ManifestSource(other).fingerprint()
    assert ManifestSource(dataset).fingerprint() == ManifestSource(dataset).fingerprint()


def test_a_record_that_is_not_codec_names_shard_and_record(tmp_path):
    manifest = make_dataset(tmp_path, [[b"not a record"]])
    manifest["record_format"] = "tpufeed.codec"
    write_manifest(tmp_path, manifest)
    with pytest.raises(CorruptDataError, match=r"data-00000-of-00001\.array_record record 0"):
        ManifestSource(tmp_path)[0]


@pytest.mark.parametrize("alias", ["symlink", "hard link"])
def test_two_entries_naming_one_file_through_a_link_are_refused(dataset, alias):
    manifest = json.loads((dataset / "manifest.json").read_text())
    first = manifest["shards"][0]["path"]
    link = os.symlink if alias == "symlink" else os.link
    link(first if alias == "symlink" else dataset / first, dataset / "alias.array_record")
    manifest["shards"][1] = dict(manifest["shards"][0], path="alias.array_record")
    manifest["num_records"] = sum(s["num_records"] for s in manifest["shards"])
    write_manifest(dataset, manifest)
    with pytest.raises(CorruptDataError, match="are the same file") as info:
        ManifestSource(dataset)
    assert repr(first) in str(info.value) and "'alias.array_record'" in str(info.value)
    assert "manifest.json" in str(info.value)


@pytest.mark.parametrize("file_format", ["array_record", "tfrecord"])
@pytest.mark.parametrize("verify", [False, True])
def test_a_shard_said_to_hold_no_records_that_holds_some_is_refused(tmp_path, file_format, verify):
    root = tmp_path / "ds"
    manifest = make_dataset(root, [_records(3), _records(4, start=3)], file_format)
    manifest["shards"][1]["num_records"] = 0
    manifest["num_records"] = 3
    if file_format == "tfrecord":  # 0 records in a TFRecord file means 0 bytes
        manifest["shards"][1]["num_bytes"] = 0
    write_manifest(root, manifest)
    with pytest.raises(CorruptDataError) as info:
        ManifestSource(root, verify=verify)
    message = str(info.value)
    if file_format == "tfrecord":
        assert "shards[1].num_records is 0" in message or "the manifest says 0" in message
    else:
        assert "holds 4 records, the manifest says 0" in message
        assert "data-00001-of-00002.array_record" in message


def test_verify_checks_every_shards_record_count(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["shards"][2]["num_records"] = 5  # it holds 6
    manifest["num_records"] = 14
    write_manifest(dataset, manifest)
    ManifestSource(dataset)  # lazy: checked on the shard's first read
    with pytest.raises(
        CorruptDataError,
        match=r"data-00002-of-00003.* holds 6 records, the "
        r"manifest says 5",
    ):
        ManifestSource(dataset, verify=True)


def test_pathologically_nested_json_is_a_clear_error(dataset):
    (dataset / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CorruptDataError, match="nested too deeply") as info:
        ManifestSource(dataset)
    assert "manifest.json" in str(info.value)


def _manifest_text(dataset, number: str, where: str = "num_records") -> None:
    """The manifest with one shard's count (and the total, so that they agree) spelt `number`."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    counts = [shard["num_records"] for shard in manifest["shards"]]
    manifest["shards"][0][where] = "@N@"
    if where == "num_records":
        manifest["num_records"] = "@T@"
    text = json.dumps(manifest).replace('"@N@"', number)
    short = number.isdigit() and len(number) < 100
    total = str(int(number) + sum(counts[1:])) if short else number
    (dataset / "manifest.json").write_text(text.replace('"@T@"', total))


@pytest.mark.parametrize(
    "number, where, match",
    [
        ("9" * 5000, "num_records", "not valid JSON"),  # more digits than int() takes
        (str(1 << 63), "num_records", r"shards\[0\].num_records is 9223372036854775808"),
        (str(1 << 70), "num_bytes", r"shards\[0\].num_bytes is 1180591620717411303424"),
        ("1e400", "num_records", r"shards\[0\].num_records is inf"),
        ("NaN", "num_bytes", r"shards\[0\].num_bytes is nan"),
        (str((1 << 63) - 10), "num_records", "'shards' hold 9,223,372,036,854,775,"),
    ],
    ids=["digits", "past-int64", "2**70-bytes", "inf", "nan", "sum-past-int64"],
)
def test_absurd_numbers_in_a_manifest_are_refused_naming_the_field(dataset, number, where, match):
    _manifest_text(dataset, number, where)
    with pytest.raises(CorruptDataError, match=match) as info:
        tpufeed.Dataset.open(dataset)
    assert str(dataset / "manifest.json") in str(info.value)


def test_a_huge_count_that_fits_is_refused_when_its_shard_is_read(dataset):
    """2**40 records said of a 128 KiB ArrayRecord shard: the count is checked against the
    file on its first read, never trusted to size anything before that."""
    _manifest_text(dataset, str(1 << 40))
    ds = tpufeed.Dataset.open(dataset).shuffle(seed=0).batch(4)
    with pytest.raises(CorruptDataError, match="manifest says 1099511627776") as info:
        next(iter(ds))
    assert "data-00000-of-00003.array_record" in str(info.value)
