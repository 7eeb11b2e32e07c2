"""The build's statistics (manifest "statistics") against a direct count over the built dataset:
per field, per input file and of the record sizes, on 1 and 2 build workers and through Beam's
portable runner (LOOPBACK), and from `WriteShards` in a user's pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tests.beam.expanding import EXPAND
from tpufeed.beam import BuildConfig, build
from tpufeed.sources.built.length_histogram import bucket_edges, bucket_of

_A, _B = 260, 140  # records of a.jsonl and b.jsonl


def _inputs(tmp_path) -> list[str]:
    rng = np.random.default_rng(0)
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(_A):
            tokens = list(range(int(rng.integers(1, 3000))))
            f.write(json.dumps({"id": i, "tokens": tokens, "text": "w" * (i % 17)}) + "\n")
    with open(tmp_path / "b.jsonl", "w") as f:
        for i in range(_A, _A + _B):
            f.write(json.dumps({"id": i, "tokens": [1] * (1 + i % 40), "text": "c"}) + "\n")
    (tmp_path / "t.py").write_text(EXPAND)
    return [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]


def _made(ids: range) -> int:
    """Records EXPAND makes of input ids `ids`."""
    return sum(0 if i % 7 == 3 else 2 if i % 5 == 0 else 1 for i in ids)


def _build(tmp_path, workers: int = 1, beam_args: tuple[str, ...] = ()) -> dict:
    """Builds both inputs through EXPAND into 3 shards, in blocks of ~20 KB (several a file)."""
    out = tmp_path / "out"
    build(
        BuildConfig(
            inputs=tuple(_inputs(tmp_path)),
            output=str(out),
            num_shards=3,
            transforms=(f"{tmp_path / 't.py'}:expand",),
            block_bytes=20_000,
            workers=workers,
            beam_args=beam_args,
            overwrite=True,
        )
    )
    return json.loads((out / "manifest.json").read_text())


def _histogram_rows(lengths: list[int]) -> list[list[int]]:
    """The histogram of `lengths`, counted here one length at a time."""
    counts: dict[int, int] = {}
    for n in lengths:
        bucket = int(bucket_of(np.array([n]))[0])
        counts[bucket] = counts.get(bucket, 0) + 1
    return [[*bucket_edges(b), counts[b]] for b in sorted(counts)]


def _direct_count(root) -> dict:
    """What the statistics should say, counted over the dataset's records and shard bytes."""
    manifest = json.loads((root / "manifest.json").read_text())
    source = tpufeed.Dataset.open(root, verify=True).source
    records = source.__getitems__(range(len(source)))
    shards = tpufeed.Dataset.from_array_record([str(root / s["path"]) for s in manifest["shards"]])
    sizes = [len(record) for record in shards]  # the stored records' bytes
    fields = {}
    for key in sorted({k for r in records for k in r}):
        values = [r[key] for r in records if key in r]
        lengths = [len(v) for v in values if isinstance(v, (bytes, str)) or np.ndim(v)]
        fields[key] = {"count": len(values), "lengths": lengths}
    return {"sizes": sizes, "fields": fields}


def _check(manifest: dict, root) -> None:
    assert manifest["statistics"]["inputs"][0]["read"] == _A
    stats = tpufeed.Dataset.open(root).statistics
    direct = _direct_count(root)
    assert stats.recorded and stats.num_records == len(direct["sizes"])
    assert [list(r) for r in stats.record_bytes.rows] == _histogram_rows(direct["sizes"])
    assert stats.record_bytes.sum == sum(direct["sizes"])
    assert sorted(stats.fields) == sorted(direct["fields"])
    for key, counted in direct["fields"].items():
        field = stats.fields[key]
        assert field.count == counted["count"], key
        if counted["lengths"]:
            assert [list(r) for r in field.lengths.rows] == _histogram_rows(counted["lengths"])
            assert (field.lengths.min, field.lengths.max) == (
                min(counted["lengths"]),
                max(counted["lengths"]),
            )
        else:
            assert field.lengths is None, key
    tokens = stats.fields["tokens"]
    assert tokens.types == ("ndarray:int64",) and tokens.shape == (None,) and tokens.ndims == (1,)
    assert stats.fields["id"].types == ("int",) and stats.fields["id"].shape is None
    a, b = stats.inputs
    assert (a.read, a.records) == (_A, _made(range(_A)))
    assert (b.read, b.records) == (_B, _made(range(_A, _A + _B)))
    assert a.path.endswith("a.jsonl") and b.path.endswith("b.jsonl")


def test_one_worker_s_statistics_are_a_direct_count(tmp_path):
    _check(_build(tmp_path), tmp_path / "out")


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_statistics_are_a_direct_count_and_one_worker_s(tmp_path):
    one = _build(tmp_path)["statistics"]
    two = _build(tmp_path, workers=2)
    _check(two, tmp_path / "out")
    assert two["statistics"] == one


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_portable_runner_s_statistics_are_a_direct_count(tmp_path):
    one = _build(tmp_path)["statistics"]
    portable = ("--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK")
    manifest = _build(tmp_path, beam_args=portable)
    _check(manifest, tmp_path / "out")
    assert manifest["statistics"] == one


@pytest.mark.parametrize("record_format", ["codec", "tf_example"])
def test_write_shards_statistics_count_its_records(tmp_path, record_format):
    import apache_beam as beam

    from tpufeed.beam import WriteShards, in_process_runner

    records = [{"tokens": np.arange(i % 50, dtype=np.int64), "label": i} for i in range(120)]
    with beam.Pipeline(runner=in_process_runner()) as p:
        _ = (
            p
            | beam.Create(records)
            | WriteShards(str(tmp_path / "ds"), num_shards=2, record_format=record_format)
        )
    stats = tpufeed.Dataset.open(tmp_path / "ds").statistics
    assert stats.num_records == 120 and stats.inputs is None  # a PCollection has no files
    tokens = stats.fields["tokens"].lengths
    assert [list(r) for r in tokens.rows] == _histogram_rows([i % 50 for i in range(120)])
    assert stats.fields["label"].count == 120 and stats.fields["label"].lengths is None


@pytest.mark.parametrize("keyed", [False, True])
def test_write_shards_counts_each_source_a_field_names(tmp_path, keyed):
    import apache_beam as beam

    from tpufeed.beam import WriteShards, in_process_runner

    sources = ["wiki", b"books", 7]
    records = [{"text": "x" * i, "corpus": sources[i % 3]} for i in range(50)]
    elements = [((i,), r) for i, r in enumerate(records)] if keyed else records
    with beam.Pipeline(runner=in_process_runner()) as p:
        _ = (
            p
            | beam.Create(elements)
            | WriteShards(str(tmp_path / "ds"), 2, keyed=keyed, source_field="corpus")
        )
    inputs = tpufeed.Dataset.open(tmp_path / "ds").statistics.inputs
    assert [(i.path, i.records) for i in inputs] == [("7", 16), ("books", 17), ("wiki", 17)]


def test_a_record_without_its_source_field_is_refused_by_name(tmp_path):
    import apache_beam as beam

    from tpufeed.beam import WriteShards, in_process_runner

    with pytest.raises(Exception, match=r"source_field='corpus'.*names its source"):
        with beam.Pipeline(runner=in_process_runner()) as p:
            _ = (
                p
                | beam.Create([{"text": "a"}])
                | WriteShards(str(tmp_path / "ds"), 1, source_field="corpus")
            )
    with pytest.raises(tpufeed.InvalidArgumentError, match="source_field must be a field name"):
        WriteShards(str(tmp_path / "ds"), 1, source_field="")
