"""A shard is the file that was opened, or an error: never another file's records.

Each case opens a dataset (a built one by `Dataset.open`, or plain files), then changes one of
its files on disk the way things happen: a symlink to a file outside put in its place, a file
renamed over it, a hard link to another file, a truncation, a rewrite in place. Reading then
raises `CorruptDataError` naming the file, in this process and in workers (which open their own
readers after the fork).
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tpufeed
from tests.dataset_folder import make_dataset
from tpufeed.errors import CorruptDataError
from tpufeed.sources.array_record import write_array_records
from tpufeed.sources.tfrecord import write_tfrecords

CHANGES = ["symlink outside", "rename over", "hard link", "truncate", "rewrite in place"]
EXTENSION = {"array_record": ".array_record", "tfrecord": ".tfrecord"}


def _records(start: int) -> list[dict]:
    return [{"label": i, "text": f"record {i:04d}"} for i in range(start, start + 8)]


def change(path: str, other: str, how: str) -> None:
    """Changes the file at `path` into (or towards) `other`, a file of as many records."""
    if how == "symlink outside":
        os.remove(path)
        os.symlink(other, path)
    elif how == "rename over":
        copy = path + ".new"
        shutil.copyfile(other, copy)
        os.replace(copy, path)
    elif how == "hard link":
        os.remove(path)
        os.link(other, path)
    elif how == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)
    else:  # the same size, other bytes, written through the same inode
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.write(bytes(b ^ 0x5A for b in f.read(64)))
        # as a writer a second later would leave it (kernel clocks tick in milliseconds)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


@pytest.fixture(params=sorted(EXTENSION))
def built(request, tmp_path):
    """(dataset root, its first shard, a same-count shard of other records outside the root)."""
    file_format = request.param
    make_dataset(tmp_path / "ds", [_records(0), _records(8)], file_format)
    make_dataset(tmp_path / "other", [_records(100)], file_format)
    ext = EXTENSION[file_format]
    return (
        tmp_path / "ds",
        str(tmp_path / "ds" / f"data-00000-of-00002{ext}"),
        str(tmp_path / "other" / f"data-00000-of-00001{ext}"),
    )


def labels(ds) -> list[int]:
    return [record["label"] for record in ds]


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("verify", [True, False])
def test_a_shard_changed_after_dataset_open_is_refused_by_name(built, how, verify):
    root, shard, other = built
    ds = tpufeed.Dataset.open(root, verify=verify)
    change(shard, other, how)
    with pytest.raises(CorruptDataError) as caught:
        labels(ds)
    assert caught.value.path == shard and shard in str(caught.value)


def test_a_symlink_to_a_copy_of_the_same_bytes_is_still_another_file(built, tmp_path):
    root, shard, _ = built
    ds = tpufeed.Dataset.open(root)  # lazy: the shard's CRC is checked on its first read
    copy = str(tmp_path / "copy")
    shutil.copyfile(shard, copy)
    change(shard, copy, "symlink outside")
    with pytest.raises(CorruptDataError, match="outside the dataset root"):  # root= first
        labels(ds)


def test_a_shard_read_before_it_changed_reads_on_from_the_file_opened(built):
    root, shard, other = built
    ds = tpufeed.Dataset.open(root)
    it = iter(ds)
    assert next(it)["label"] == 0
    change(shard, other, "rename over")  # the open reader holds the file it opened
    assert [r["label"] for r in it] == list(range(1, 16))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["symlink outside", "hard link", "rewrite in place"])
def test_workers_opening_their_own_readers_refuse_a_changed_shard(built, how):
    root, shard, other = built
    ds = tpufeed.Dataset.open(root, verify=True)
    assert labels(ds) == list(range(16))  # opened and read in this process first
    change(shard, other, how)
    with pytest.raises(CorruptDataError) as caught:
        labels(ds.workers(2, isolate=True))
    assert shard in str(caught.value)


# --- plain files: from_array_record, from_tfrecord, from_parquet ---------------------------------


def _plain(tmp_path, kind: str) -> tuple[str, str, tpufeed.Dataset]:
    """(a file of a plain-files dataset, a same-count file elsewhere, the dataset)."""
    os.makedirs(tmp_path / "files")
    paths = [str(tmp_path / "files" / f"part-{i}.{kind}") for i in range(2)]
    other = str(tmp_path / f"other.{kind}")
    for path, start in zip([*paths, other], [0, 8, 100]):
        rows = [b"%04d" % i for i in range(start, start + 8)]
        if kind == "array_record":
            write_array_records(path, rows)
        elif kind == "tfrecord":
            write_tfrecords(path, rows)
        else:
            pq.write_table(pa.table({"id": [int(r) for r in rows]}), path)
    open_files = {
        "array_record": tpufeed.Dataset.from_array_record,
        "tfrecord": lambda p: tpufeed.Dataset.from_tfrecord(p, index_dir=str(tmp_path / "ix")),
        "parquet": tpufeed.Dataset.from_parquet,
    }[kind]
    return paths[0], other, open_files(paths)


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("kind", ["array_record", "tfrecord", "parquet"])
def test_plain_files_changed_after_the_dataset_was_made_are_refused(tmp_path, kind, how):
    path, other, ds = _plain(tmp_path, kind)
    change(path, other, how)
    with pytest.raises(CorruptDataError) as caught:
        list(ds)
    assert path in str(caught.value)


def test_a_plain_file_pickled_after_it_changed_is_refused_in_the_copy(tmp_path):
    import pickle

    path, other, ds = _plain(tmp_path, "array_record")
    change(path, other, "rename over")
    copy = pickle.loads(pickle.dumps(ds.source))
    with pytest.raises(CorruptDataError, match="another inode"):
        copy[0]
