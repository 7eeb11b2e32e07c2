"""Dataset.from_parquet("hf://datasets/...") against the test server laid out as the Hugging Face
Hub (HF_ENDPOINT pointing at it through the fault proxy), and https:// shards: a global shuffle
and exact resume with no download step, workers, the shard cache warm and cold, faults, and
Image columns' {bytes, path} dicts decoded by DecodeImage."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import tpufeed  # noqa: E402
from tests.sources.test_parquet import FILES, N, expected_row, same, write_files  # noqa: E402

pytestmark = pytest.mark.emulator

REPO = "org/corpus"
GLOB = f"hf://datasets/{REPO}/data/train-*.parquet"


@pytest.fixture
def repo(hub, tmp_path):
    """The test Parquet files as the Hub holds a dataset: data/train-0000K-of-0000F.parquet."""
    (tmp_path / "local").mkdir()
    paths = write_files(tmp_path / "local")
    names = [f"data/train-{k:05d}-of-{FILES:05d}.parquet" for k in range(FILES)]
    hub.create(REPO)
    hub.commit(REPO, {n: Path(p).read_bytes() for n, p in zip(names, paths)})
    hub.commit(REPO, {"README.md": b"# corpus\n", "data/test-00000-of-00001.parquet": b"x"})
    return paths


def pipeline(paths, cache_dir, host=0, hosts=1, workers=0, epochs=2, cache_bytes=None):
    return (
        tpufeed.Dataset.from_parquet(
            paths, columns=["id", "text"], cache_dir=cache_dir, cache_bytes=cache_bytes
        )
        .shuffle(7)
        .shard(host, hosts)
        .map(lambda e: e["id"])
        .batch(6)
        .repeat(epochs)
        .workers(workers)
    )


def test_rows_are_those_of_the_files_with_a_global_shuffle(repo, web, tmp_path):
    ds = tpufeed.Dataset.from_parquet(GLOB, cache_dir=tmp_path / "c")
    source = ds.source
    assert len(source) == N and [f.path for f in source.files][0].startswith(
        f"hf://datasets/{REPO}"
    )
    for i in (0, 49, 50, 149):
        assert same(source[i], expected_row(i))
    epoch = [int(i) for b in pipeline(GLOB, tmp_path / "c", epochs=1) for i in b.tolist()]
    assert sorted(epoch) == list(range(N)) and epoch != list(range(N))


@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_exact_resume_at_every_step(repo, web, tmp_path, cache_bytes):
    ds = pipeline(GLOB, tmp_path / "c", cache_bytes=cache_bytes)
    full = [b.tolist() for b in ds]
    it = ds.iterator()
    for step in range(0, len(full), 3):
        state = json.loads(json.dumps(it.get_state()))
        assert [b.tolist() for b in ds.iterator(state)] == full[step:]
        for _ in range(3):
            next(it, None)


@pytest.mark.multiprocess
def test_workers_and_hosts_read_each_row_once_through_faults(repo, web, tmp_path):
    web.set_faults(error_503=0.1, reset=0.05, cut=0.05, stall=0.02, delay_s=1.0, seed=2)
    seen = []
    for host in range(2):
        ds = tpufeed.Dataset.from_parquet(
            GLOB, columns=["id"], cache_dir=tmp_path / "c", timeout_s=20
        )
        ds = ds.shuffle(3).shard(host, 2).map(lambda e: int(e["id"])).workers(2)
        seen += list(ds)
    assert sorted(seen) == list(range(N)) and web.counters.faults > 0


def test_a_second_epoch_reads_nothing_from_the_hub(repo, web, tmp_path):
    it = iter(pipeline(GLOB, tmp_path / "c"))
    first = [next(it).tolist() for _ in range(N // 6)]
    assert web.counters.media_bytes > 0
    web.reset()
    second = [b.tolist() for b in it]
    assert sorted(sum(second, [])) == sorted(sum(first, [])) == list(range(N))
    assert (web.counters.media_requests, web.counters.requests) == (0, 0)


def test_https_shards_listed_one_by_one(repo, web, web_bucket, web_upload, tmp_path):
    urls = [web_upload(web_bucket, Path(p).name, p) for p in repo]
    ids = [i for b in pipeline(urls, tmp_path / "c", epochs=1) for i in b.tolist()]
    assert sorted(ids) == list(range(N))


def test_image_columns_decode_with_decode_image(hub, web, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    from tpufeed.transforms import DecodeImage

    pixels = [np.full((4, 5, 3), k * 40, np.uint8) for k in range(3)]
    encoded = []
    for array in pixels:
        out = io.BytesIO()
        Image.fromarray(array).save(out, format="PNG")
        encoded.append(out.getvalue())
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array(
                [{"bytes": e, "path": f"{k}.png"} for k, e in enumerate(encoded)], image
            ),
            "label": [0, 1, 2],
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    hub.create("org/images")
    hub.commit("org/images", {"data/train-0.parquet": out.getvalue()})
    ds = tpufeed.Dataset.from_parquet(
        "hf://datasets/org/images/data/*.parquet", cache_dir=tmp_path / "c"
    )
    rows = list(ds.map(DecodeImage()))
    assert [int(r["label"]) for r in rows] == [0, 1, 2]
    for row, want in zip(rows, pixels):
        assert np.array_equal(row["image"], want)
