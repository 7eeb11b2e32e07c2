"""Resuming a state only into the files it was taken on (issue 30 item 6), or knowingly.

Files are real, written by their own libraries; each case saves a state, changes a file the
way it happens between a save and a resume, and resumes in a new Dataset, as a restarted job
does.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tpufeed
from tests.dataset_folder import make_dataset
from tpufeed.errors import StateError
from tpufeed.sources.array_record import write_array_records
from tpufeed.sources.tfrecord import write_tfrecords

RECORDS = 12


def write(path: str, kind: str, start: int) -> None:
    """`RECORDS` records numbered from `start`, all of one size: a replacement with other
    numbers has the same count and the same size."""
    rows = [b"%04d" % i for i in range(start, start + RECORDS)]
    tmp = f"{path}.tmp"
    if kind == "array_record":
        write_array_records(tmp, rows)
    elif kind == "tfrecord":
        write_tfrecords(tmp, rows)
    else:
        pq.write_table(pa.table({"id": [int(r) for r in rows]}), tmp)
    os.replace(tmp, path)


def files(folder, kind: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f"part-{i}.{kind}") for i in range(2)]
    for i, path in enumerate(paths):
        write(path, kind, 100 * i)
    return paths


def dataset(paths: list[str], kind: str) -> tpufeed.Dataset:
    constructor = {
        "array_record": tpufeed.Dataset.from_array_record,
        "tfrecord": tpufeed.Dataset.from_tfrecord,
        "parquet": tpufeed.Dataset.from_parquet,
    }[kind]
    return constructor(paths).shuffle(seed=1).batch(5)


def values(items) -> list:
    out = []
    for item in items:
        column = item["id"] if isinstance(item, dict) else item
        out.append([int(v) for v in np.asarray(column).tolist()])
    return out


def saved(paths: list[str], kind: str, steps: int = 2) -> dict:
    it = dataset(paths, kind).iterator()
    for _ in range(steps):
        next(it)
    return json.loads(json.dumps(it.get_state()))  # as a checkpoint stores it


def rewrite_later(path: str, kind: str, start: int) -> None:
    """Replaces the file with other records of the same count, as a writer a second later
    would (kernel clocks tick in milliseconds: the test does not rely on one ticking)."""
    before = os.stat(path).st_mtime_ns
    write(path, kind, start)
    os.utime(path, ns=(before + 10**9, before + 10**9))


@pytest.mark.parametrize("kind", ["array_record", "tfrecord", "parquet"])
def test_a_file_replaced_between_save_and_resume_is_refused_by_name(tmp_path, kind):
    paths = files(tmp_path / "data", kind)
    state = saved(paths, kind)
    rewrite_later(paths[1], kind, 500)
    with pytest.raises(StateError, match=r"part-1\.") as caught:
        dataset(paths, kind).iterator(state)
    assert "accept_changed_shards" in str(caught.value)
    with pytest.raises(StateError, match=r"part-1\."):
        dataset(paths, kind).iterator([state])  # as one host of a list
    it = dataset(paths, kind).iterator()
    with pytest.raises(StateError, match=r"part-1\."):
        it.set_state(state)


def test_a_file_rewritten_in_place_with_its_old_size_is_refused(tmp_path):
    paths = files(tmp_path / "data", "array_record")
    state = saved(paths, "array_record")
    st = os.stat(paths[0])
    with open(paths[0], "r+b") as f:  # same inode, same size, other bytes
        f.seek(100)
        f.write(b"\xff" * 8)
    os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(StateError, match=r"part-0\.array_record"):
        dataset(paths, "array_record").iterator(state)


def test_accepting_the_change_knowingly_resumes_into_the_new_records(tmp_path):
    paths = files(tmp_path / "data", "array_record")
    state = saved(paths, "array_record")
    expected_after = values(dataset(paths, "array_record").iterator(state))
    rewrite_later(paths[1], "array_record", 500)
    accepted = tpufeed.accept_changed_shards(state)
    assert accepted["shards"] is None and state["shards"] is not None  # a copy, same keys
    resumed = values(dataset(paths, "array_record").iterator(accepted))
    assert len(resumed) == len(expected_after) and resumed != expected_after
    assert any(v >= 500 for batch in resumed for v in batch)
    as_text = tpufeed.accept_changed_shards(json.dumps(state))
    assert values(dataset(paths, "array_record").iterator(as_text)) == resumed
    (listed,) = tpufeed.accept_changed_shards([state])
    assert values(dataset(paths, "array_record").iterator([listed])) == resumed


def test_unchanged_files_resume_exactly_here_and_where_copied_with_their_times(tmp_path):
    paths = files(tmp_path / "data", "array_record")
    whole = values(dataset(paths, "array_record"))
    state = saved(paths, "array_record", steps=2)
    assert values(dataset(paths, "array_record").iterator(state)) == whole[2:]
    moved = [shutil.copy2(p, tmp_path / os.path.basename(p)) for p in paths]  # times kept
    assert values(dataset(moved, "array_record").iterator(state)) == whole[2:]


def test_a_built_dataset_copied_without_its_times_resumes(tmp_path):
    """Built datasets are known by their manifest's sizes and CRC32Cs: every host's copy of
    one is the same dataset, whatever its files' times."""
    make_dataset(tmp_path / "a", [[b"%02d" % i for i in range(j, j + 6)] for j in (0, 6)])
    ds = tpufeed.Dataset.open(tmp_path / "a").batch(4)
    it = ds.iterator()
    next(it)
    state = it.get_state()
    shutil.copytree(tmp_path / "a", tmp_path / "b", copy_function=shutil.copyfile)
    again = tpufeed.Dataset.open(tmp_path / "b").batch(4)
    assert values(again.iterator(state)) == values(list(ds)[1:])


def test_every_state_of_a_pipeline_has_the_same_keys(tmp_path):
    paths = files(tmp_path / "data", "array_record")
    it = dataset(paths, "array_record").repeat(2).iterator()
    keys = {tuple(sorted(it.get_state()))}
    for _ in it:
        keys.add(tuple(sorted(it.get_state())))
    assert keys == {tuple(sorted(["version", "fingerprint", "shards", "parts", *CURSOR]))}
    assert len(json.dumps(it.get_state())) < 300


CURSOR = ["epoch", "base", "hosts", "host", "consumed", "emitted", "layers", "carries"]


def test_states_without_a_record_of_their_files_still_load(tmp_path):
    """States written before the record existed (and version 1 states) are not checked."""
    paths = files(tmp_path / "data", "array_record")
    state = saved(paths, "array_record")
    whole = values(dataset(paths, "array_record"))
    old = {key: value for key, value in state.items() if key != "shards"}
    for older in (old, {**old, "version": 1}):
        assert values(dataset(paths, "array_record").iterator(older)) == whole[2:]


def test_a_mixture_refuses_a_changed_file_of_a_component(tmp_path):
    a = files(tmp_path / "a", "array_record")
    b = files(tmp_path / "b", "array_record")

    def mixed():
        return tpufeed.Dataset.mix(
            [tpufeed.Dataset.from_array_record(a), tpufeed.Dataset.from_array_record(b)],
            weights=[0.5, 0.5],
            seed=0,
        ).batch(3)

    it = mixed().iterator()
    next(it)
    state = it.get_state()
    resumed = mixed().iterator(state)
    assert values(next(resumed) for _ in range(3)) == values(next(it) for _ in range(3))
    rewrite_later(b[0], "array_record", 700)
    with pytest.raises(StateError, match=r"b/part-0\.array_record"):
        mixed().iterator(state)


@pytest.mark.parametrize(
    "bad", [["abc"], "0123456789abcdef", [1, 2], ["0123456789abcdef", "x"], ["x", True]]
)
def test_a_malformed_record_of_the_files_is_a_state_error(tmp_path, bad):
    paths = files(tmp_path / "data", "array_record")
    state = {**saved(paths, "array_record"), "shards": bad}
    with pytest.raises(StateError, match="'shards'"):
        dataset(paths, "array_record").iterator(state)


@pytest.mark.emulator
def test_a_gs_file_replaced_between_save_and_resume_is_refused(gcs, bucket, upload, tmp_path):
    local = files(tmp_path / "data", "array_record")
    urls = [upload(bucket, os.path.basename(p), p) for p in local]
    ds = tpufeed.Dataset.from_array_record(urls).batch(5)
    it = ds.iterator()
    next(it)
    state = it.get_state()
    assert values(tpufeed.Dataset.from_array_record(urls).batch(5).iterator(state)) == values(
        list(ds)[1:]
    )
    write(local[1], "array_record", 900)
    upload(bucket, os.path.basename(local[1]), local[1])  # a new generation, other records
    with pytest.raises(StateError, match=r"part-1\.array_record"):
        tpufeed.Dataset.from_array_record(urls).batch(5).iterator(state)
