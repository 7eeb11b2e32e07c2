"""One conformance suite that every source passes, and the DESIGN.md semantics end to end on
files written by array_record's, TensorFlow's, pyarrow's and MosaicML Streaming's own writers
(Streaming's: tests/data/mds/conformance, by tests/data/mds/write_fixtures.py), and a dataset
TFDS prepares (tests/sources/tfds_builders.py)."""

import json
import os
import pathlib
import pickle

import numpy as np
import pytest

import tpufeed
from tpufeed import codec
from tpufeed.errors import CorruptDataError, RecordIndexError, SourceNotFoundError, StateError

N = 90
RECORDS = [codec.encode({"id": i, "x": np.full(i % 7, i, np.int16)}) for i in range(N)]


def write_array_record_files(root):
    from array_record.python.array_record_module import ArrayRecordWriter

    paths = []
    for shard, part in enumerate(np.array_split(np.arange(N), 3)):
        path = os.path.join(root, f"part-{shard}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for i in part:
            writer.write(RECORDS[i])
        writer.close()
        paths.append(path)
    return paths


def write_tfrecord_files(root):
    tf = pytest.importorskip("tensorflow")
    paths = []
    for shard, part in enumerate(np.array_split(np.arange(N), 3)):
        path = os.path.join(root, f"part-{shard}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in part:
                writer.write(RECORDS[i])
        paths.append(path)
    return paths


def write_parquet_files(root):
    """The records as a binary column beside others; read back with columns=["record"]."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    paths = []
    for shard, part in enumerate(np.array_split(np.arange(N), 3)):
        path = os.path.join(root, f"part-{shard}.parquet")
        table = pa.table({"id": part, "record": pa.array([RECORDS[i] for i in part], pa.binary())})
        pq.write_table(table, path, row_group_size=8)
        paths.append(path)
    return paths


def record_of(element):
    """The record itself: Parquet rows and MDS samples are dicts of their columns."""
    return element["record"] if isinstance(element, dict) else element


def decode(element):
    return codec.decode(record_of(element))


class UserSource:
    def __len__(self):
        return N

    def __getitem__(self, i):
        return RECORDS[i]


MDS_FOLDER = pathlib.Path(__file__).parent.parent / "data" / "mds" / "conformance"


@pytest.fixture(params=["array_record", "tfrecord", "parquet", "mds", "tfds", "sequence", "user"])
def dataset_factory(request, tmp_path):
    kind = request.param
    if kind == "tfds":  # the records as a bytes feature of a dataset TFDS prepares, in order
        builders = pytest.importorskip("tests.sources.tfds_builders")
        builders.TpufeedRecords.RECORDS = RECORDS
        builders.prepare(builders.TpufeedRecords, tmp_path, "array_record")
        return lambda: tpufeed.Dataset.from_tfds("tpufeed_records", "train", data_dir=tmp_path)
    if kind == "array_record":
        paths = write_array_record_files(tmp_path)
        return lambda: tpufeed.Dataset.from_array_record(str(tmp_path / "part-*.array_record"))
    if kind == "tfrecord":
        paths = write_tfrecord_files(tmp_path)
        return lambda: tpufeed.Dataset.from_tfrecord(paths)
    if kind == "parquet":
        write_parquet_files(tmp_path)
        return lambda: tpufeed.Dataset.from_parquet(
            str(tmp_path / "part-*.parquet"), columns=["record"]
        )
    if kind == "mds":
        return lambda: tpufeed.Dataset.from_mds(MDS_FOLDER)
    if kind == "sequence":
        return lambda: tpufeed.Dataset.from_sequence(RECORDS)
    return lambda: tpufeed.Dataset.from_source(UserSource())


def test_source_protocol(dataset_factory):
    source = dataset_factory().source
    assert len(source) == N
    assert [record_of(source[i]) for i in range(N)] == RECORDS
    picks = [57, 3, 89, 3, 0]
    if hasattr(source, "__getitems__"):
        assert [record_of(r) for r in source.__getitems__(picks)] == [RECORDS[i] for i in picks]
    with pytest.raises((RecordIndexError, IndexError)):
        source[N]
    copy = pickle.loads(pickle.dumps(source))
    assert record_of(copy[45]) == RECORDS[45]


@pytest.mark.parametrize("hosts", [1, 2, 3, 8])
def test_exactly_once_deterministic_and_per_record_random(dataset_factory, hosts):
    def pipeline(host, host_count):
        return (
            dataset_factory()
            .shuffle(11)
            .shard(host, host_count)
            .map(decode)
            .random_map(lambda e, rng: {"id": e["id"], "r": rng.random()})
            .batch(4)
            .repeat(2)
        )

    def run(host_count):
        per_epoch, noise = {0: [], 1: []}, {}
        for host in range(host_count):
            it = pipeline(host, host_count).iterator()
            for batch in it:
                epoch = it.get_state()["epoch"]
                per_epoch[epoch] += batch["id"].tolist()
                noise.update(
                    {(epoch, i): r for i, r in zip(batch["id"].tolist(), batch["r"].tolist())}
                )
        return per_epoch, noise

    per_epoch, noise = run(hosts)
    assert sorted(per_epoch[0]) == sorted(per_epoch[1]) == list(range(N))
    assert per_epoch[0] != per_epoch[1]
    assert run(hosts) == (per_epoch, noise)  # deterministic
    assert run(1)[1] == noise  # augmentation independent of the host count


def test_resume_at_arbitrary_steps_and_elastic(dataset_factory):
    ds = dataset_factory().shuffle(5).map(decode).map(lambda e: e["id"]).batch(7).repeat(2)
    full = [b.tolist() for b in ds]
    it = ds.iterator()
    for step in range(len(full)):
        state = json.loads(json.dumps(it.get_state()))
        assert [b.tolist() for b in ds.iterator(state)] == full[step:]
        next(it)

    # 4 hosts in lockstep for 2 steps, then 2 hosts finish the epoch.
    def sharded(host, hosts):
        return (
            dataset_factory()
            .shuffle(5)
            .shard(host, hosts)
            .map(decode)
            .map(lambda e: e["id"])
            .batch(7)
        )

    seen, state = [], None
    for host in range(4):
        it = sharded(host, 4).iterator()
        seen += [i for _ in range(2) for i in next(it).tolist()]
        state = it.get_state()
    for host in range(2):
        seen += [i for b in sharded(host, 2).iterator(state) for i in b.tolist()]
    assert sorted(seen) == list(range(N))
    with pytest.raises(StateError):
        tpufeed.Dataset.from_sequence(RECORDS[:-1]).shuffle(5).map(codec.decode).map(
            lambda e: e["id"]
        ).batch(7).repeat(2).iterator(state)


def test_the_same_records_through_every_file_format(tmp_path):
    ar = tpufeed.Dataset.from_array_record(write_array_record_files(tmp_path))
    tfr = tpufeed.Dataset.from_tfrecord(write_tfrecord_files(tmp_path))
    assert list(ar.shuffle(1)) == list(tfr.shuffle(1))
    parquet = tpufeed.Dataset.from_parquet(write_parquet_files(tmp_path)).map(record_of)
    assert list(ar.shuffle(1)) == list(parquet.shuffle(1))


def test_bad_files_through_the_dataset_api(tmp_path):
    with pytest.raises(SourceNotFoundError, match="nothing-here"):
        tpufeed.Dataset.from_array_record(str(tmp_path / "nothing-here.array_record"))
    with pytest.raises(SourceNotFoundError, match="no file matches"):
        tpufeed.Dataset.from_tfrecord(str(tmp_path / "*.nothing"))
    paths = write_array_record_files(tmp_path)
    with open(paths[1], "r+b") as f:
        f.truncate(os.path.getsize(paths[1]) // 2)
    with pytest.raises(CorruptDataError, match="part-1.array_record"):
        tpufeed.Dataset.from_array_record(paths)
    tf_paths = write_tfrecord_files(tmp_path)
    with open(tf_paths[2], "r+b") as f:
        f.truncate(os.path.getsize(tf_paths[2]) - 3)
    ds = tpufeed.Dataset.from_tfrecord(tf_paths)  # a torn record fails when it is read
    with pytest.raises(CorruptDataError, match=r"part-2.tfrecord: record 29 .*torn"):
        list(ds)
    assert len(list(ds.ignore_errors(1))) == N - 1


@pytest.mark.parametrize("hosts,workers", [(1, 0), (3, 0), (2, 2)])
def test_windowed_shuffle_is_exactly_once_and_resumable(tmp_path, hosts, workers):
    write_array_record_files(tmp_path)

    def make(host):
        return (
            tpufeed.Dataset.from_array_record(str(tmp_path / "*.array_record"))
            .shuffle(2, window=2)
            .shard(host, hosts)
            .map(codec.decode)
            .map(lambda e: e["id"])
            .batch(8)
            .repeat(2)
            .workers(workers)
        )

    seen = {0: [], 1: []}
    for host in range(hosts):
        it = make(host).iterator()
        for batch in it:
            seen[it.get_state()["epoch"]] += batch.tolist()
    assert sorted(seen[0]) == sorted(seen[1]) == list(range(N))
    assert seen[0] != seen[1]
    full = [b.tolist() for b in make(0)]
    it = make(0).iterator()
    next(it), next(it)
    assert [b.tolist() for b in make(0).iterator(it.get_state())] == full[2:]
    it.close()


def test_windowed_shuffle_needs_a_file_source():
    with pytest.raises(tpufeed.InvalidArgumentError, match="has no shards"):
        tpufeed.Dataset.from_sequence([1, 2]).shuffle(0, window=2)
