"""benchmarks/pack_fill.py at a tiny size: every row packs every token of the same documents,
and the table says what each row made."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import pack_fill

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_row_packs_every_token_of_the_same_documents():
    pytest.importorskip("grain")
    docs = pack_fill.corpus(40)
    results = pack_fill.run(docs, [4], seeds=2)
    assert [r["row"] for r in results] == list(pack_fill.ROWS)
    for r in results:
        assert r["tokens"] == sum(len(d) for d in docs), r["row"]
        assert 0 <= r["padding"] < 1
        assert r["rows"] * pack_fill.LENGTH >= r["tokens"]
    first_fit, best_fit = results[0], results[1]
    assert best_fit["rows"] <= first_fit["rows"] * 1.05


@pytest.mark.slow
def test_the_script_prints_the_table_and_writes_the_json(tmp_path):
    pytest.importorskip("grain")
    out = tmp_path / "fill.json"
    command = ["benchmarks/pack_fill.py", "--documents", "30", "--seeds", "1", "--open-rows", "2,8"]
    result = subprocess.run(
        [sys.executable, *command, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 2 * len(pack_fill.ROWS)
    assert "| 8 | grain best-fit |" in result.stdout
    saved = json.loads(out.read_text())
    assert saved["documents"] == 30 and len(saved["results"]) == 8
