"""`tpufeed inspect` shows a built dataset's statistics: record sizes and each field's lengths
(quantiles, a histogram by powers of two), fields' counts, types and shapes, input files; a
dataset built before statistics says they were not recorded, damaged ones say what is wrong."""

from __future__ import annotations

import json

import numpy as np

from tests.dataset_folder import make_dataset
from tpufeed import cli


def _inspect(capsys, *args) -> str:
    assert cli.main(["inspect", *map(str, args)]) == 0
    return capsys.readouterr().out


def _dataset(root) -> dict:
    records = [{"tokens": np.arange(n % 300 + 1, dtype=np.int32), "id": n} for n in range(500)]
    manifest = make_dataset(root, [records[:250], records[250:]])
    manifest["statistics"]["inputs"] = [{"path": "raw/a.jsonl", "read": 510, "records": 500}]
    (root / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_inspect_shows_the_statistics(tmp_path, capsys):
    _dataset(tmp_path)
    out = _inspect(capsys, tmp_path).splitlines()
    at = out.index("statistics (counted by the build):")
    assert out[at + 1].startswith("  record bytes: ")
    assert "  field id: in 500 records, int" in out
    assert "  field tokens: in 500 records, ndarray:int32, shape [null]" in out
    lengths = next(line for line in out if line.startswith("    lengths: 1 to 300, mean 130.5"))
    assert "median 127" in lengths and "90% 255" in lengths  # the buckets' highest
    assert "99% 300" in lengths  # the bucket's highest, 319, is more than the greatest
    after = out[out.index(lengths) + 1 :]
    bars = [line.split() for line in after[: next(i for i, s in enumerate(after) if "#" not in s)]]
    assert [b[0] for b in bars[:4]] == ["1", "2-3", "4-7", "8-15"]
    assert sum(int(b[1].replace(",", "")) for b in bars[:9]) == 500  # 1 to 256-511
    assert "  input raw/a.jsonl: 510 records read, 500 records in the dataset" in out


def test_inspect_json_holds_them_and_an_old_dataset_says_not_recorded(tmp_path, capsys):
    manifest = _dataset(tmp_path)
    doc = json.loads(_inspect(capsys, tmp_path, "--json"))
    tokens = doc["statistics"]["fields"]["tokens"]
    assert tokens["lengths"]["max"] == 300 and tokens["ndims"] == [1]
    assert doc["statistics"]["inputs"][0]["records"] == 500
    del manifest["statistics"]["version"]  # as tpufeed 0.2 wrote them
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    doc = json.loads(_inspect(capsys, tmp_path, "--json"))
    assert doc["statistics"] == {
        "recorded": False,
        "why": "the dataset was built before tpufeed recorded statistics",
    }
    assert "statistics: not recorded (the dataset was built before tpufeed recorded" in (
        _inspect(capsys, tmp_path)
    )


def test_damaged_statistics_are_named_and_the_rest_is_shown(tmp_path, capsys):
    manifest = _dataset(tmp_path)
    manifest["statistics"]["fields"]["tokens"]["lengths"]["histogram"][0] = [1, 2, 1]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    out = _inspect(capsys, tmp_path)
    assert "500 records in 2 array_record shards" in out
    assert (
        "statistics: not recorded (damaged: " in out
        and "statistics.fields.tokens.lengths.histogram[0] is [1, 2, 1], not a non-empty "
        "bucket of the fixed edges"
        in out
    )
