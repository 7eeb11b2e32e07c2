"""Dataset.from_parquet on files written by pyarrow: row groups, nulls, nested lists, strings,
several files; columns=, shuffle, exact and elastic resume, workers, fork, gs://, and errors."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import tpufeed  # noqa: E402
from tpufeed.errors import (  # noqa: E402
    CorruptDataError,
    InvalidArgumentError,
    RecordIndexError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.sources.parquet.source import ParquetSource, iter_parquet_rows  # noqa: E402

FILES, ROWS, GROUP = 3, 50, 8  # 50 rows a file in row groups of 8: 7 groups, the last of 2
N = FILES * ROWS


def expected_row(i: int) -> dict:
    """Row i of the dataset, as from_parquet gives it."""
    return {
        "id": np.int64(i),
        "score": None if i % 5 == 0 else np.float32(i / 2),
        "count": None if i % 6 == 0 else np.int32(i),  # ints with nulls stay ints
        "text": None if i % 7 == 0 else f"row {i} \u00e9",
        "tokens": None if i % 11 == 0 else np.arange(i % 4, dtype=np.int64),
        "grid": grid(i),
        "meta": {"a": np.int64(i), "b": f"m{i}"},
        "blob": bytes([i % 256]) * (i % 3),
    }


def grid(i: int):
    """A list of lists: a 2-D array when rectangular, a list of arrays when ragged."""
    if i % 2 == 0:
        return np.full((2, 3), i, np.int16)
    rows = [np.arange(j + 1, dtype=np.int16) for j in range(i % 3)]
    return rows if len(rows) > 1 else np.array(rows, np.int16).reshape(len(rows), len(rows))


def write_files(
    root, files: int = FILES, rows: int = ROWS, group: int = GROUP, **options
) -> list[str]:
    paths = []
    for f in range(files):
        ids = range(f * rows, (f + 1) * rows)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "score": pa.array([None if i % 5 == 0 else i / 2 for i in ids], pa.float32()),
                "count": pa.array([None if i % 6 == 0 else i for i in ids], pa.int32()),
                "text": pa.array([None if i % 7 == 0 else f"row {i} \u00e9" for i in ids]),
                "tokens": pa.array(
                    [None if i % 11 == 0 else list(range(i % 4)) for i in ids], pa.list_(pa.int64())
                ),
                "grid": pa.array(
                    [
                        [list(range(j + 1)) for j in range(i % 3)] if i % 2 else [[i] * 3, [i] * 3]
                        for i in ids
                    ],
                    pa.list_(pa.list_(pa.int16())),
                ),
                "meta": pa.array([{"a": i, "b": f"m{i}"} for i in ids]),
                "blob": pa.array([bytes([i % 256]) * (i % 3) for i in ids], pa.binary()),
            }
        )
        path = os.path.join(root, f"part-{f}.parquet")
        pq.write_table(table, path, row_group_size=group, **options)
        paths.append(path)
    return paths


def same(got, want) -> bool:
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, np.ndarray):
        return isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)
    if isinstance(want, np.generic):
        return type(got) is type(want) and got == want
    return type(got) is type(want) and got == want


@pytest.fixture
def paths(tmp_path):
    return write_files(tmp_path)


def test_rows_are_typed_dicts_with_nulls_nested_lists_and_strings(paths, tmp_path):
    ds = tpufeed.Dataset.from_parquet(str(tmp_path / "part-*.parquet"))
    source = ds.source
    assert len(source) == N and len(ds) == N
    assert source.files[0].num_row_groups == 7
    for i in range(N):
        assert same(source[i], expected_row(i)), (i, source[i])
    picks = [149, 3, 77, 3, 0, 48]
    assert all(map(same, source.__getitems__(picks), map(expected_row, picks)))
    assert source.__getitems__([]) == []
    element = source[9]
    element["tokens"][0] = 99  # arrays are the element's own, writable
    assert source[9]["tokens"][0] == 0


def test_paths_as_a_list_a_glob_or_one_path(paths, tmp_path):
    one = tpufeed.Dataset.from_parquet(paths[1]).source
    assert len(one) == ROWS and same(one[0], expected_row(ROWS))
    listed = tpufeed.Dataset.from_parquet([paths[2], paths[0]]).source
    assert same(listed[0], expected_row(2 * ROWS)) and same(listed[ROWS], expected_row(0))


def test_columns_selects_and_orders_keys(paths):
    source = tpufeed.Dataset.from_parquet(paths, columns=["text", "id"]).source
    assert list(source[8]) == ["text", "id"]
    assert source[8] == {"text": "row 8 \u00e9", "id": 8}
    with pytest.raises(InvalidArgumentError, match=r"part-0.parquet has no column 'nope', 'gone'"):
        tpufeed.Dataset.from_parquet(paths, columns=["id", "nope", "gone"])
    for bad in ("id", [], ["id", "id"], [3]):
        with pytest.raises(InvalidArgumentError, match="columns"):
            tpufeed.Dataset.from_parquet(paths, columns=bad)


def test_batches_stack_and_pad(paths):
    ds = (
        tpufeed.Dataset.from_parquet(paths, columns=["id", "tokens"])
        .filter(lambda e: e["tokens"] is not None)
        .batch(4, pad={"tokens": 4})
    )
    batch = next(iter(ds))
    assert batch["id"].tolist() == [1, 2, 3, 4]
    assert batch["tokens"].tolist() == [[0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 2, 0], [0, 0, 0, 0]]


def ids(ds) -> list[int]:
    return [int(i) for b in ds for i in b.tolist()]


def pipeline(paths, host=0, hosts=1, workers=0, epochs=2, window=None, decoded_bytes=256 << 20):
    return (
        tpufeed.Dataset.from_parquet(paths, columns=["id", "text"], decoded_bytes=decoded_bytes)
        .shuffle(7, window=window)
        .shard(host, hosts)
        .map(lambda e: e["id"])
        .batch(6)
        .repeat(epochs)
        .workers(workers)
    )


@pytest.mark.parametrize("hosts", [1, 2, 3])
def test_shuffle_is_exactly_once_per_epoch_and_deterministic(paths, hosts):
    epochs: dict[int, list[int]] = {0: [], 1: []}
    for host in range(hosts):
        it = pipeline(paths, host, hosts).iterator()
        for batch in it:
            epochs[it.get_state()["epoch"]] += batch.tolist()
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(N))
    assert epochs[0] != epochs[1] and epochs[0] != list(range(N))
    assert ids(pipeline(paths)) == ids(pipeline(paths))


def test_exact_resume_at_every_step(paths):
    ds = pipeline(paths)
    full = [b.tolist() for b in ds]
    it = ds.iterator()
    for step in range(len(full)):
        state = json.loads(json.dumps(it.get_state()))
        assert [b.tolist() for b in ds.iterator(state)] == full[step:]
        next(it)


@pytest.mark.parametrize("old,new", [(3, 2), (2, 4), (1, 3)])
def test_elastic_resume_from_every_hosts_state(paths, old, new):
    seen, states = [], []
    for host in range(old):  # hosts stop at different steps: states on another host count
        it = pipeline(paths, host, old, epochs=1).iterator()
        for _ in range(host + 1):
            seen += next(it).tolist()
        states.append(it.get_state())
    for host in range(new):
        seen += ids(pipeline(paths, host, new, epochs=1).iterator(states))
    assert sorted(seen) == list(range(N))


def test_workers_give_the_same_batches_and_resume(paths):
    alone = [b.tolist() for b in pipeline(paths)]
    assert [b.tolist() for b in pipeline(paths, workers=2)] == alone
    it = pipeline(paths, workers=2).iterator()
    for _ in range(5):
        next(it)
    state = it.get_state()
    it.close()
    assert [b.tolist() for b in pipeline(paths, workers=2).iterator(state)] == alone[5:]


def test_windowed_shuffle_and_decode_counts(paths):
    assert sorted(ids(pipeline(paths, window=1, epochs=1))) == list(range(N))
    roomy = tpufeed.Dataset.from_parquet(paths, columns=["id"])
    assert sorted(ids(roomy.shuffle(3).map(lambda e: e["id"]).batch(10))) == list(range(N))
    assert roomy.source.decoded.decodes == 3 * 7  # every row group decoded once: they all fit
    tiny = tpufeed.Dataset.from_parquet(paths, columns=["id"], decoded_bytes=0)
    assert sorted(ids(tiny.shuffle(3).map(lambda e: e["id"]).batch(10))) == list(range(N))
    assert tiny.source.decoded.decodes > 3 * 7  # shuffled reads revisit evicted row groups


def test_pickled_and_forked_sources_start_without_decoded_groups(paths):
    source = ParquetSource(paths)
    assert same(source[60], expected_row(60)) and source.decoded.decodes == 1
    copy = pickle.loads(pickle.dumps(source))
    assert copy.decoded.decodes == 0 and same(copy[61], expected_row(61))
    ctx = multiprocessing.get_context("fork")  # the child gets the source as it is, unpickled
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=_read_in_child, args=(source, child_end))
    child.start()
    assert parent_end.recv() == (0, 1, 62)  # the parent's row group was dropped, then decoded
    child.join(30)
    assert child.exitcode == 0


def _read_in_child(source, out) -> None:
    before = source.decoded.decodes
    row = int(source.files[1].read(np.array([12]))[0]["id"])
    out.send((before, source.decoded.decodes, row))


def test_iter_parquet_rows_streams_one_file(paths):
    rows = list(iter_parquet_rows(paths[1]))
    assert len(rows) == ROWS and all(same(r, expected_row(ROWS + i)) for i, r in enumerate(rows))
    assert list(iter_parquet_rows(paths[0], columns=["id"]))[3] == {"id": 3}


def test_a_file_that_is_not_parquet_is_named(paths, tmp_path):
    with open(paths[1], "r+b") as f:
        f.truncate(os.path.getsize(paths[1]) - 5)
    with pytest.raises(CorruptDataError, match=r"part-1.parquet: not a readable Parquet file"):
        tpufeed.Dataset.from_parquet(paths)
    (tmp_path / "notes.parquet").write_text("hello")
    with pytest.raises(CorruptDataError, match="notes.parquet"):
        tpufeed.Dataset.from_parquet(str(tmp_path / "notes.parquet"))
    with pytest.raises(SourceNotFoundError, match="nothing-here"):
        tpufeed.Dataset.from_parquet(str(tmp_path / "nothing-here.parquet"))
    with pytest.raises(SourceNotFoundError, match="no file matches"):
        tpufeed.Dataset.from_parquet(str(tmp_path / "*.nothing"))


def test_schemas_differing_between_files_are_named(paths, tmp_path):
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), tmp_path / "other.parquet")
    with pytest.raises(
        SourceError,
        match=r"other.parquet: column 'id' is int32 here but int64 "
        r"in .*part-0.parquet",
    ):
        tpufeed.Dataset.from_parquet([paths[0], str(tmp_path / "other.parquet")], columns=["id"])
    with pytest.raises(SourceError, match=r"other.parquet: its schema differs .*only there"):
        tpufeed.Dataset.from_parquet([paths[0], str(tmp_path / "other.parquet")])
    with pytest.raises(InvalidArgumentError, match=r"other.parquet has no column 'text'"):
        tpufeed.Dataset.from_parquet(
            [paths[0], str(tmp_path / "other.parquet")], columns=["id", "text"]
        )


def test_a_footer_that_disagrees_with_itself_is_named(tmp_path):
    """Parquet keeps no checksum of its footer: a column name damaged in the Parquet schema
    would read as another column; the Arrow schema stored beside it still has the name."""
    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"alpha": [1, 2, 3], "beta": ["x", "y", "z"]}), path)
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.index(b"alpha", footer)  # its first mention: the schema element's name
    data[at + 4] ^= ord("a") ^ ord("b")
    path.write_bytes(bytes(data))
    assert pq.read_table(path).column_names == ["alphb", "beta"]  # what pyarrow reads
    with pytest.raises(
        CorruptDataError, match=r"one.parquet: the footer's column names: \['alphb', 'beta'\]"
    ) as e:
        tpufeed.Dataset.from_parquet(str(path))
    assert e.value.path == str(path)


@pytest.mark.parametrize("length", [1 << 31, (1 << 32) - 1, 0])
def test_a_footer_length_past_the_file_is_named(tmp_path, length):
    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"alpha": [1, 2, 3]}), path)
    data = bytearray(path.read_bytes())
    data[-8:-4] = length.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match=r"one.parquet: not a readable Parquet file") as e:
        tpufeed.Dataset.from_parquet(str(path))
    assert e.value.path == str(path)


def test_damaged_data_names_file_row_and_cause(tmp_path):
    path = write_files(tmp_path, files=1, compression="snappy", write_page_checksum=True)[0]
    meta = pq.read_metadata(path)
    column = meta.row_group(2).column(0)  # "id" of rows 16..23
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    with open(path, "r+b") as f:  # the last bytes of its last page
        f.seek(start + column.total_compressed_size - 4)
        flipped = bytes(b ^ 0xFF for b in f.read(4))
        f.seek(-4, os.SEEK_CUR)
        f.write(flipped)
    ds = tpufeed.Dataset.from_parquet(path, columns=["id"])
    with pytest.raises(
        CorruptDataError,
        match=r"part-0.parquet row 16 \(row group 2, rows "
        r"16-23\) cannot be decoded",
    ):
        list(ds)
    assert len(list(ds.ignore_errors(8))) == ROWS - 8
    with pytest.raises(RecordIndexError, match="out of range"):
        ds.source[ROWS]


def test_a_file_changed_after_opening_is_refused(tmp_path):
    path = write_files(tmp_path, files=1)[0]
    ds = tpufeed.Dataset.from_parquet(path)
    write_files(tmp_path, files=1, rows=ROWS + 1)
    with pytest.raises(CorruptDataError, match="changed since it was first opened"):
        ds.source[0]


@pytest.mark.emulator
@pytest.mark.parametrize("cache_bytes,workers", [(None, 0), (0, 0), (None, 2)])
def test_gs_files_through_the_shard_cache_or_by_ranges(
    gcs, bucket, upload, paths, tmp_path, cache_bytes, workers
):
    for path in paths:
        upload(bucket, f"pq/{os.path.basename(path)}", path)
    gcs.set_faults(error_503=0.05, seed=3)  # retried away
    ds = tpufeed.Dataset.from_parquet(
        f"gs://{bucket}/pq/part-*.parquet",
        columns=["id", "text"],
        cache_dir=tmp_path / "c",
        cache_bytes=cache_bytes,
    )
    assert len(ds) == N
    assert same(ds.source[77], {k: expected_row(77)[k] for k in ("id", "text")})
    local = pipeline(paths, epochs=1)
    remote = ds.shuffle(7).map(lambda e: e["id"]).batch(6).workers(workers)
    assert [b.tolist() for b in remote] == [b.tolist() for b in local]
    cached = os.path.isdir(tmp_path / "c") and any(
        f.endswith(".parquet") or "part-" in f for _, _, fs in os.walk(tmp_path / "c") for f in fs
    )
    assert cached == (cache_bytes is None)
    url = f"gs://{bucket}/pq/part-1.parquet"
    assert [int(r["id"]) for r in iter_parquet_rows(url, columns=["id"])] == list(
        range(ROWS, 2 * ROWS)
    )


def test_bytes_read_counts_the_row_groups_read_as_stored(tmp_path):
    from tpufeed.observe import counts

    path = str(tmp_path / "counted.parquet")
    table = pa.table({"a": np.arange(1000), "b": [f"row {i}" for i in range(1000)]})
    pq.write_table(table, path, row_group_size=250)
    meta = pq.read_metadata(path)
    stored_a = sum(meta.row_group(g).column(0).total_compressed_size for g in range(4))
    before = counts.snapshot()
    source = ParquetSource(path, columns=["a"])
    assert len(source.__getitems__(list(range(1000)))) == 1000
    assert counts.since(before)["bytes_read"] == stored_a  # column "a" only, each group once


def test_list_columns_decode_without_pandas(tmp_path):
    """The parquet extra brings no pandas: an empty list takes its dtype from Arrow (pyarrow's
    `to_pandas_dtype` imports pandas, and failed every read of a list column without it)."""
    import subprocess
    import sys
    from pathlib import Path

    path = str(tmp_path / "lists.parquet")
    pq.write_table(
        pa.table({"tokens": pa.array([[1, None], [], None], pa.list_(pa.int32()))}), path
    )
    code = (
        "import sys\n"
        "class NoPandas:  # as if not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "from tpufeed.sources.parquet.source import ParquetSource\n"
        f"rows = [ParquetSource({path!r})[i]['tokens'] for i in range(3)]\n"
        "print([None if v is None else int(v) for v in rows[0]], rows[1].dtype, rows[1].shape, rows[2])\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1,", "None]", "int32", "(0,)", "None"]
