"""The docs site: every guide's code runs as written, and `mkdocs build --strict` passes.

Each guide in docs/ runs in its own process, in a fresh folder: its ```python blocks execute in
order in one namespace (so a block builds on the ones before it), and its ```bash blocks run
in the same folder at their place in that order. A block fenced ```python {.skip} (or
```bash {.skip}) is shown but not run; SKIPPED lists each such block and why, and the test
fails if the page and the list disagree. docs/reference/ holds no code of its own: mkdocstrings
renders it from the docstrings.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# A fenced block: ```lang or ```lang {.skip}, up to the closing fence at the same indentation.
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<code>.*?)^(?P=indent)```[ ]*$",
    re.M | re.S,
)
RUN = {"python", "bash"}

GUIDES = sorted(
    str(p.relative_to(DOCS))
    for p in DOCS.rglob("*.md")
    if p.relative_to(DOCS).parts[0] != "reference"
)

# (page, n-th fenced block of the page, counting from 1): why it is shown but not run.
SKIPPED = {
    ("multi-host.md", 1): "starts a multi-host run: jax.distributed.initialize() needs every "
    "host of a pod slice (the rest of the page runs the hosts as shards "
    "and threads of one process)",
    ("offline-build.md", 6): "runs the build on Dataflow: needs a Google Cloud project and bucket",
    ("coming-from/streaming.md", 1): "MosaicML Streaming pins numpy < 2.2: it runs in an "
    "environment of its own, not beside this one",
    ("coming-from/streaming.md", 2): "the conversion reads MDS with Streaming itself (its own "
    "environment); the next block writes the same records",
}

# Pages whose blocks need a GCS bucket: they run against the local emulator (tests/gcs_emulator.py)
# with the bucket they name created there.
GCS_PAGES = {"gcs.md": "my-bucket"}

RUNNER = """\
import json, subprocess, sys
ns = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1])):
    print(f"--- {block['where']}", flush=True)
    if block["lang"] == "bash":
        subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]], check=True)
    else:
        exec(compile(block["code"], block["where"], "exec"), ns)
"""


def blocks(page: str) -> list[dict]:
    """Every fenced block of `page`: its number, language, code, line and whether it is skipped."""
    text = (DOCS / page).read_text()
    out = []
    for number, m in enumerate(FENCE.finditer(text), 1):
        line = text.count("\n", 0, m.start()) + 2
        code = re.sub(rf"^{m['indent']}", "", m["code"], flags=re.M)
        out.append(
            {
                "number": number,
                "lang": m["lang"],
                "skip": ".skip" in m["attrs"],
                "code": code,
                "where": f"docs/{page}:{line}",
            }
        )
    return out


def test_pages_found():
    assert {
        "quickstart.md",
        "multi-host.md",
        "gcs.md",
        "language-models.md",
        "checkpoints.md",
        "offline-build.md",
        "tuning.md",
        "coming-from/grain.md",
        "coming-from/tf-data.md",
        "coming-from/pytorch.md",
        "coming-from/huggingface.md",
        "coming-from/streaming.md",
        "coming-from/webdataset.md",
        "coming-from/tfds.md",
    } <= set(GUIDES)


def test_skipped_blocks_are_the_listed_ones():
    marked = {(page, b["number"]) for page in GUIDES for b in blocks(page) if b["skip"]}
    assert marked == set(SKIPPED), "mark these blocks {.skip} or update SKIPPED"


def runnable(page: str) -> list[dict]:
    return [b for b in blocks(page) if b["lang"] in RUN and not b["skip"]]


@pytest.mark.slow
@pytest.mark.parametrize("page", [page for page in GUIDES if runnable(page)])
def test_guide_code_runs(page, tmp_path, request):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TPUFEED_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("XLA_FLAGS", None)  # a page that wants fake devices sets them itself
    if page in GCS_PAGES:
        emulator = request.getfixturevalue("emulator")
        client = emulator.client()
        if client.lookup_bucket(GCS_PAGES[page]) is None:
            client.create_bucket(GCS_PAGES[page])
        env["STORAGE_EMULATOR_HOST"] = emulator.url
    (tmp_path / "blocks.json").write_text(json.dumps(runnable(page)))
    (tmp_path / "run_page.py").write_text(RUNNER)
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, str(tmp_path / "run_page.py"), str(tmp_path / "blocks.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"{page}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


@pytest.mark.slow
def test_streaming_guide_runs_whole_beside_streaming(tmp_path):
    """docs/coming-from/streaming.md with its skipped blocks, in an environment that has
    MosaicML Streaming (which pins numpy < 2.2): `TPUFEED_STREAMING_PYTHON` names its python,
    made by `python -m venv V && V/bin/pip install -c constraints/ci.txt torch mosaicml-streaming
    && V/bin/pip install -e .`."""
    python = os.environ.get("TPUFEED_STREAMING_PYTHON")
    if not python:
        pytest.skip("set TPUFEED_STREAMING_PYTHON to a python that has mosaicml-streaming")
    page = [b for b in blocks("coming-from/streaming.md") if b["lang"] == "python"]
    assert sum(b["skip"] for b in page) == 2
    (tmp_path / "blocks.json").write_text(json.dumps(page))
    (tmp_path / "run_page.py").write_text(RUNNER)
    result = subprocess.run(
        [python, str(tmp_path / "run_page.py"), str(tmp_path / "blocks.json")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python", reason="pip install -e '.[dev]'")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-6000:]
    reference = (tmp_path / "site" / "reference" / "dataset" / "index.html").read_text()
    assert "from_array_record" in reference and "&gt;&gt;&gt;" in reference  # rendered docstrings
    assert "<blockquote" not in reference and "doctest" not in reference  # examples as code
