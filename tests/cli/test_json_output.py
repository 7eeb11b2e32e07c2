"""`--json` (tpufeed/cli/json_output.py): every command that prints data prints one strict JSON
document on stdout, nothing else, under its versioned schema, with every key it holds
documented there (the CLI reference is written from those schemas)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tpufeed import codec
from tpufeed.cli.json_output import (
    BENCH,
    BUILD,
    CACHE_CLEAR,
    CACHE_LS,
    INSPECT,
    QUICKSTART,
    SCHEMAS,
    JsonSchema,
    jsonable,
)
from tpufeed.cli.program import build_parser
from tpufeed.sources.array_record import write_array_records


def tpufeed(*args: object, cwd: object = None, timeout: float = 180) -> subprocess.CompletedProcess:
    # -P: like the installed `tpufeed` script, without the working directory on sys.path.
    python = [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]
    return subprocess.run(
        [*python, "-m", "tpufeed.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def key_paths(value: object, schema: JsonSchema, at: str = "") -> set[str]:
    """The paths of `value`'s keys in the schema's notation (`files[].path`, `fields{}.dtype`),
    down to the paths the schema documents as a whole."""
    below = (at + ".", at + "[]", at + "{}")
    if at and not any(path.startswith(below) for path in schema.fields):
        return {at}
    found = {at} if at and not at.endswith(("[]", "{}")) else set()
    if isinstance(value, list):
        for item in value:
            found |= key_paths(item, schema, at + "[]")
    elif isinstance(value, dict):
        keyed_by_data = any(path.startswith(at + "{}") for path in schema.fields)
        for key, item in value.items():
            child = at + "{}" if keyed_by_data else f"{at}.{key}" if at else key
            found |= key_paths(item, schema, child)
    return found


def parsed(result: subprocess.CompletedProcess, schema: JsonSchema, code: int = 0) -> dict:
    """stdout as the one strict-JSON document of `schema`, every key of it documented."""
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-4000:]
    document = json.loads(result.stdout, parse_constant=_refuse_non_finite)
    assert document["schema"] == schema.id
    top = {path for path in schema.fields if not any(c in path for c in ".[{")}
    assert set(document) == top, "every documented top-level key, and no other"
    undocumented = key_paths(document, schema) - set(schema.fields)
    assert not undocumented, f"document these keys in json_output.{schema.name}: {undocumented}"
    return document


def _refuse_non_finite(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON: non-finite numbers must be null")


def test_each_schema_is_named_versioned_and_documents_its_schema_key():
    assert len({s.id for s in SCHEMAS}) == len(SCHEMAS)
    for schema in SCHEMAS:
        assert schema.id.startswith("tpufeed.") and schema.version >= 1
        assert schema.fields["schema"] == f'"{schema.id}"'
        for path in schema.fields:  # each nested path hangs from a documented one
            parent = path.rsplit(".", 1)[0].removesuffix("[]").removesuffix("{}")
            assert parent == path or parent in schema.fields, path


def test_every_json_option_names_the_schemas_it_prints():
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    printed = set()
    for name, parser in sub.choices.items():
        assert "--json" in parser._option_string_actions, f"tpufeed {name} has no --json"
        for schema in parser.get_default("json_schemas"):
            assert schema.id in parser._option_string_actions["--json"].help
            printed.add(schema.id)
    assert printed == {s.id for s in SCHEMAS}


def test_jsonable_makes_strict_json():
    value = {"a": np.int64(3), "b": np.arange(2), "c": (1.5, float("inf")), 4: float("nan")}
    assert jsonable(value) == {"a": 3, "b": [0, 1], "c": [1.5, None], "4": None}
    json.dumps(jsonable(value), allow_nan=False)


@pytest.fixture
def files(tmp_path):
    write_array_records(
        tmp_path / "codec.array_record",
        [codec.encode({"x": np.arange(3) + i, "label": i}) for i in range(5)],
    )
    write_array_records(tmp_path / "raw.array_record", [b"r%d" % i * 40 for i in range(5)])
    (tmp_path / "folder").mkdir()
    write_array_records(tmp_path / "folder" / "part-0.array_record", [b"a", b"b"])
    return tmp_path


def test_inspect_files_a_folder_and_raw_bytes(files):
    doc = parsed(tpufeed("inspect", "codec.array_record", "--json", cwd=files), INSPECT)
    assert (doc["kind"], doc["file_format"], doc["num_records"]) == ("files", "array_record", 5)
    assert doc["record_0"]["fields"] == {
        "x": {"dtype": "int64", "shape": [3], "repr": "[0, 1, 2]"},
        "label": {"type": "int", "repr": "0"},
    }
    doc = parsed(tpufeed("inspect", "raw.array_record", "--verify", "--json", cwd=files), INSPECT)
    assert bytes.fromhex(doc["record_0"]["head_hex"]) == b"r0" * 32
    assert doc["verify"] == {"checked": 1, "method": "read", "failures": []}
    doc = parsed(tpufeed("inspect", "folder", "--json", cwd=files), INSPECT)
    assert doc["kind"] == "folder" and doc["files"][0]["num_records"] == 2


@pytest.mark.slow
def test_inspect_a_dataset_and_a_failed_verification(tmp_path):
    pytest.importorskip("apache_beam")
    (tmp_path / "in.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(20)))
    built = tpufeed(
        "build",
        "--input",
        "in.jsonl",
        "--output",
        "ds",
        "--num-shards",
        "2",
        "--json",
        cwd=tmp_path,
    )
    doc = parsed(built, BUILD)
    assert (doc["records_in"], doc["records_out"], doc["shards"]) == (20, 20, 2)
    assert "records in" not in doc and doc["file_format"] == "array_record"
    doc = parsed(tpufeed("inspect", "ds", "--json", cwd=tmp_path), INSPECT)
    assert (doc["kind"], doc["record_format"], doc["num_records"]) == (
        "dataset",
        "tpufeed.codec",
        20,
    )
    assert doc["features"]["id"]["type"] == "int" and len(doc["files"]) == 2
    statistics = doc["statistics"]
    assert statistics["inputs"] == [{"path": "in.jsonl", "read": 20, "records": 20}]
    assert statistics["fields"]["id"]["count"] == 20 and statistics["num_records"] == 20
    assert statistics["fields"]["id"]["lengths"] == "not recorded"  # a scalar
    shard = tmp_path / "ds" / doc["files"][0]["path"]
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = tpufeed("inspect", "ds", "--verify", "--json", cwd=tmp_path)
    doc = parsed(result, INSPECT, code=1)
    assert doc["verify"]["method"] == "manifest" and doc["record_0"] is None
    assert [shard.name in failure for failure in doc["verify"]["failures"]] == [True]
    assert "failed verification" in result.stderr


@pytest.mark.emulator
def test_cache_ls_and_clear(gcs, bucket, upload, tmp_path):
    from tests.gcs_emulator import upload_shards
    from tpufeed.sources.array_record import ArrayRecordSource
    from tpufeed.storage.cache.shard_cache import ShardCache

    url, _ = upload_shards(upload, bucket, "json", 2, 10)
    source = ArrayRecordSource(url, cache=ShardCache(tmp_path / "c"))
    source.__getitems__(np.arange(len(source)))
    source.close()
    doc = parsed(tpufeed("cache", "ls", "--dir", tmp_path / "c", "--json"), CACHE_LS)
    assert doc["num_entries"] == 2 and all(e["complete"] for e in doc["entries"])
    assert doc["total_bytes"] == sum(e["size"] for e in doc["entries"]) > 0
    assert all(e["url"].startswith(f"gs://{bucket}/") for e in doc["entries"])
    doc = parsed(tpufeed("cache", "clear", "--dir", tmp_path / "c", "--json"), CACHE_CLEAR)
    assert doc["removed_files"] >= 2 and doc["kept_in_use"] == 0
    doc = parsed(tpufeed("cache", "ls", "--dir", tmp_path / "c", "--json"), CACHE_LS)
    assert doc["entries"] == [] and doc["total_bytes"] == 0


def test_bench(tmp_path):
    (tmp_path / "pipeline.py").write_text(
        textwrap.dedent("""
            import numpy as np, tpufeed

            def make_dataset():
                ds = tpufeed.Dataset.from_sequence(list(range(512)))
                return ds.map(lambda i: np.full(4, i)).batch(8)
        """)
    )
    result = tpufeed("bench", "pipeline.py:make_dataset", "--batches", "10", "--json", cwd=tmp_path)
    doc = parsed(result, BENCH)
    assert doc["stats"]["batches"] == 10 and doc["trace"] is None
    assert doc["verdict"]["input_bound"] is None  # no --step-time


@pytest.mark.slow
def test_quickstart(tmp_path):
    pytest.importorskip("jax")
    result = tpufeed("quickstart", "--output", "qs", "--epochs", "1", "--json", cwd=tmp_path)
    doc = parsed(result, QUICKSTART)
    assert doc["exactly_once_every_epoch"] and doc["resume_matches"]
    assert doc["train_records"] == 1536 and doc["dataset"] == str(tmp_path / "qs")
    assert "training on" in result.stderr  # the progress bar, beside the document
