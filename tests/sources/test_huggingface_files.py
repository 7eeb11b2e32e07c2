"""Dataset.from_huggingface on a Hugging Face `IterableDataset` (`streaming=True`): the real
`datasets` library streams from the test server laid out as the Hub (its endpoint pointed at
the fault proxy), and tpufeed reads the Parquet files under it in place, at the commit
`datasets` resolved, with a global shuffle and exact resume; what it cannot replay is refused
with the line that reads the files, and that line is run (tpufeed/sources/huggingface_files.py).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import tpufeed  # noqa: E402
from tests.sources.test_parquet import FILES, N, expected_row, same, write_files  # noqa: E402
from tpufeed.errors import InvalidArgumentError  # noqa: E402

pytestmark = pytest.mark.emulator

REPO = "org/corpus"
NAMES = [f"data/train-{k:05d}-of-{FILES:05d}.parquet" for k in range(FILES)]


@pytest.fixture
def streaming(hub, web, monkeypatch, tmp_path):
    """`datasets` and `huggingface_hub` pointed at the test Hub. Both read HF_ENDPOINT when
    imported, so their constants are set here; their caches go under tmp_path."""
    from huggingface_hub import HfFileSystem, constants

    monkeypatch.setattr(constants, "ENDPOINT", web.url)
    template = web.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", web.url)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setattr(datasets.config, "HF_MODULES_CACHE", tmp_path / "modules")
    HfFileSystem.clear_instance_cache()
    yield hub
    HfFileSystem.clear_instance_cache()


@pytest.fixture
def repo(streaming, tmp_path):
    """The Parquet test files as the Hub holds a dataset (data/train-0000K-of-0000F.parquet);
    returns the commit."""
    (tmp_path / "local").mkdir()
    paths = write_files(tmp_path / "local")
    streaming.create(REPO)
    return streaming.commit(
        REPO,
        {"README.md": b"# corpus\n", **{n: Path(p).read_bytes() for n, p in zip(NAMES, paths)}},
    )


def stream(**options):
    return datasets.load_dataset(REPO, split="train", streaming=True, **options)


def ids(ds) -> list[int]:
    return [int(i) for batch in ds for i in np.atleast_1d(batch)]


def test_a_hub_dataset_is_read_in_place_at_the_commit_datasets_resolved(repo, hub, tmp_path):
    hf = stream()
    assert [row["id"] for row in hf] == list(range(N))  # what datasets itself streams
    hub.commit(REPO, {NAMES[0]: b"the branch moved on"})
    ds = tpufeed.Dataset.from_huggingface(hf, cache_dir=tmp_path / "c")
    source = ds.source
    assert [f.path for f in source.files] == [f"hf://datasets/{REPO}@{repo}/{n}" for n in NAMES]
    assert len(source) == N and all(same(source[i], expected_row(i)) for i in (0, 49, 50, 149))
    epoch = ids(ds.shuffle(7).map(lambda e: e["id"]).batch(10))
    assert sorted(epoch) == list(range(N)) and epoch != list(range(N))


def test_parquet_data_files_named_by_hf_urls(repo, tmp_path):
    """load_dataset("parquet", data_files="hf://...") names the files as given (no commit)."""
    hf = datasets.load_dataset(
        "parquet", data_files=f"hf://datasets/{REPO}/data/*.parquet", split="train", streaming=True
    )
    ds = tpufeed.Dataset.from_huggingface(hf, columns=["id"], cache_dir=tmp_path / "c")
    assert [f.path for f in ds.source.files] == [f"hf://datasets/{REPO}/{n}" for n in NAMES]
    assert [int(row["id"]) for row in ds] == [row["id"] for row in hf] == list(range(N))


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_exact_resume_at_every_step_and_each_row_once_on_two_hosts(repo, tmp_path, workers):
    def pipeline(host=0, hosts=1):
        ds = tpufeed.Dataset.from_huggingface(stream(), columns=["id"], cache_dir=tmp_path / "c")
        ds = ds.shuffle(3).shard(host, hosts).map(lambda e: e["id"]).batch(8).repeat(2)
        return ds.workers(workers)

    ds = pipeline()
    full = [b.tolist() for b in ds]
    it = ds.iterator()
    for step in range(0, len(full), 5):
        state = json.loads(json.dumps(it.get_state()))
        assert [b.tolist() for b in ds.iterator(state)] == full[step:]
        for _ in range(5):
            next(it, None)
    shares = [ids(pipeline(host, 2)) for host in range(2)]
    assert sorted(shares[0] + shares[1]) == sorted(list(range(N)) * 2)


def test_columns_kept_by_the_dataset_and_picked_by_columns(repo, tmp_path):
    picked = stream().select_columns(["text", "id"])
    rows = list(tpufeed.Dataset.from_huggingface(picked, cache_dir=tmp_path / "c"))
    assert set(rows[0]) == {"id", "text"} and same(rows[8]["text"], expected_row(8)["text"])
    only = tpufeed.Dataset.from_huggingface(picked, columns=["id"], cache_dir=tmp_path / "c")
    assert [int(r["id"]) for r in only] == list(range(N))
    with pytest.raises(InvalidArgumentError, match=r"no column 'score'; it keeps \['text', 'id'\]"):
        tpufeed.Dataset.from_huggingface(picked, columns=["score"])
    built = tpufeed.Dataset.from_huggingface(stream(columns=["count"]), cache_dir=tmp_path / "c")
    assert [sorted(r) for r in built][:1] == [["count"]]  # the builder's columns=


def test_local_parquet_files_and_the_numpy_format(streaming, tmp_path):
    paths = write_files(tmp_path)
    hf = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
    ds = tpufeed.Dataset.from_huggingface(hf.with_format("numpy"))
    assert [f.path for f in ds.source.files] == paths
    assert all(same(row, expected_row(i)) for i, row in enumerate(ds))
    two = datasets.load_dataset("parquet", data_files=paths[:2], split="train", streaming=True)
    with pytest.raises(InvalidArgumentError, match=r"applies take\(\)") as refused:
        tpufeed.Dataset.from_huggingface(two.take(3))
    line = re.search(r"(tpufeed\.Dataset\.from_parquet\(.*?\))", str(refused.value))[1]
    assert line == f"tpufeed.Dataset.from_parquet({paths[:2]!r})"  # a glob would take the third


REFUSED = {
    "map": (lambda hf: hf.map(lambda e: e), r"applies map\(\)"),
    "rename": (lambda hf: hf.rename_column("id", "key"), r"applies map\(\)"),
    "filter": (lambda hf: hf.filter(lambda e: True), r"applies filter\(\)"),
    "shuffle": (lambda hf: hf.shuffle(seed=0), r"applies shuffle\(\)"),
    "take": (lambda hf: hf.take(5), r"applies take\(\)"),
    "skip": (lambda hf: hf.skip(5), r"applies skip\(\)"),
    "cast": (
        lambda hf: hf.cast_column("id", datasets.Value("int32")),
        r"casts column id",
    ),
    "torch": (lambda hf: hf.with_format("torch"), r"is formatted as 'torch'"),
    "by_node": (
        lambda hf: __import__("datasets.distributed").distributed.split_dataset_by_node(
            hf, rank=0, world_size=2
        ),
        r"split by node|applies shard\(\)",
    ),
    "filters=": (
        lambda hf: stream(filters=[("id", "<", 5)]),
        r"filters its rows \(filters=\)",
    ),
    "features=": (
        lambda hf: stream(features=hf.features),
        r"casts its columns to the features= given",
    ),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_what_it_cannot_replay_is_refused_with_the_line_that_reads_its_files(repo, what, tmp_path):
    change, why = REFUSED[what]
    with pytest.raises(InvalidArgumentError, match=why) as refused:
        tpufeed.Dataset.from_huggingface(change(stream()))
    line = re.search(r"(tpufeed\.Dataset\.from_parquet\(.*?\))", str(refused.value))[1]
    assert (
        line
        == f"tpufeed.Dataset.from_parquet('hf://datasets/{REPO}@{repo}/data/train-*-of-00003.parquet')"
    )
    ds = eval(line, {"tpufeed": tpufeed})  # the line, as the message gives it
    assert [int(row["id"]) for row in ds] == list(range(N))


def test_other_files_point_at_the_hubs_parquet_copy(streaming, tmp_path):
    lines = b"".join(json.dumps({"id": i, "text": f"t{i}"}).encode() + b"\n" for i in range(9))
    streaming.create("org/lines")
    streaming.commit("org/lines", {"README.md": b"# lines\n", "data/train.jsonl": lines})
    copy = io.BytesIO()
    pq.write_table(pa.table({"id": range(9), "text": [f"t{i}" for i in range(9)]}), copy)
    streaming.commit(
        "org/lines", {"default/train/0000.parquet": copy.getvalue()}, "refs/convert/parquet"
    )
    hf = datasets.load_dataset("org/lines", split="train", streaming=True)
    assert [row["id"] for row in hf] == list(range(9))
    with pytest.raises(InvalidArgumentError, match="streams JsonLines files") as refused:
        tpufeed.Dataset.from_huggingface(hf)
    line = re.search(r"(tpufeed\.Dataset\.from_parquet\(.*?\))", str(refused.value))[1]
    want = "hf://datasets/org/lines@refs%2Fconvert%2Fparquet/default/train/*.parquet"
    assert line == f"tpufeed.Dataset.from_parquet({want!r})"
    rows = list(eval(line, {"tpufeed": tpufeed}))
    assert [(int(r["id"]), r["text"]) for r in rows] == [(i, f"t{i}") for i in range(9)]


def test_an_image_column_streamed_from_the_hub_decodes_with_decode_image(streaming, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    from tpufeed.transforms import DecodeImage, ResizedCenterCrop

    pixels = [np.full((6, 8, 3), 40 * k, np.uint8) for k in range(3)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    table = datasets.Dataset.from_dict(
        {"image": [Image.fromarray(p) for p in pixels], "label": [0, 1, 2]}, features=features
    )
    out = io.BytesIO()
    table.to_parquet(out)
    streaming.create("org/images")
    streaming.commit(
        "org/images",
        {"README.md": b"# images\n", "data/train-00000-of-00001.parquet": out.getvalue()},
    )
    hf = datasets.load_dataset("org/images", split="train", streaming=True)
    assert [np.asarray(row["image"]).tolist() for row in hf] == [p.tolist() for p in pixels]
    ds = tpufeed.Dataset.from_huggingface(hf, cache_dir=tmp_path / "c")
    rows = list(ds.map(DecodeImage()))
    assert [int(r["label"]) for r in rows] == [0, 1, 2]
    assert all(np.array_equal(r["image"], p) for r, p in zip(rows, pixels))
    cropped = list(ds.map(ResizedCenterCrop(4)))
    assert [r["image"].shape for r in cropped] == [(4, 4, 3)] * 3


def test_image_columns_of_a_datasets_dataset_decode_with_decode_image():
    """Not streamed: a datasets.Dataset whose Image() column datasets encoded itself."""
    Image = pytest.importorskip("PIL.Image")
    from tpufeed.transforms import DecodeImage

    pixels = [np.full((4, 5, 3), 40 * k, np.uint8) for k in range(3)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    hf = datasets.Dataset.from_dict(
        {"image": [Image.fromarray(p) for p in pixels], "label": [0, 1, 2]}, features=features
    )
    rows = list(tpufeed.Dataset.from_huggingface(hf).map(DecodeImage()).workers(0))
    assert [int(r["label"]) for r in rows] == [0, 1, 2]
    assert all(np.array_equal(r["image"], p) for r, p in zip(rows, pixels))


def test_one_split_is_asked_for(repo):
    splits = datasets.load_dataset(REPO, streaming=True)
    with pytest.raises(
        InvalidArgumentError, match=r"one split, got a IterableDatasetDict of \['train'\]"
    ):
        tpufeed.Dataset.from_huggingface(splits)
