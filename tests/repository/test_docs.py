"""The docs site: every guide's code runs as written, and `mkdocs build --strict` passes.

Each guide in docs/ runs in its own process, in a fresh folder: its ```python blocks execute in
order in one namespace (so a block builds on the ones before it), and its ```bash blocks run
in the same folder at their place in that order. A block fenced ```python {.skip} (or
```bash {.skip}) is shown but not run; SKIPPED lists each such block and why, and the test
fails if the page and the list disagree. docs/reference/ holds no code of its own: mkdocstrings
renders it from the docstrings.
"""

from __future__ import annotations

import ast
import html
import json
import os
import pathlib
import re
import shutil
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
    ("offline-build.md", 7): "runs the build on Dataflow: needs a Google Cloud project and bucket",
    ("build-at-scale.md", 2): "runs the build on Flink and on a job server: needs those "
    "services (tests/beam/test_build_portable.py runs the path with Beam's embedded one)",
    ("coming-from/streaming.md", 1): "MosaicML Streaming pins numpy < 2.2: it runs in an "
    "environment of its own, not beside this one",
    ("coming-from/streaming.md", 2): "reads the MDS folder that Streaming wrote in the block "
    "before (its own environment); the next block writes the same records",
    ("formats/mds.md", 1): "MosaicML Streaming pins numpy < 2.2: it runs in an environment of its "
    "own; the next block copies the folder this code wrote for tpufeed's tests",
    ("formats/mds.md", 5): "runs Streaming's benchmark rows (minutes, and Streaming's environment)",
    ("coming-from/pytorch.md", 2): "needs torch_xla, which runs only with its own torch (2.9): "
    ".ci/xla.py runs this loop in an environment of its own (tests/adapters/test_torch_xla.py)",
}

# Pages that, run in a checkout of the repository, leave `git status` as it was: what they
# write, .gitignore covers. (The other guides write their example data where they run.)
CLEAN_IN_A_CHECKOUT = {"quickstart.md"}

# Pages whose blocks need a GCS bucket: they run against the local emulator (tests/gcs_emulator.py)
# with the bucket they name created there.
GCS_PAGES = {"gcs.md": "my-bucket"}
# Pages whose blocks need an S3 bucket: they run against a local S3 server (tests/s3_server.py).
S3_PAGES = {"s3.md": "my-bucket"}
# Pages whose blocks read the Hugging Face Hub (hf://, datasets' streaming, resolve URLs): they
# run against the test server laid out as the Hub (tests/http_server.py), named by HF_ENDPOINT,
# holding the dataset repository they name (hub_corpus).
HUB_PAGES = {"https.md": "my-org/my-corpus", "coming-from/huggingface.md": "my-org/my-corpus"}

# Guarded, as a script that starts processes with spawn must be: a spawned process (a
# DataLoader's worker) imports this file again and must not run the page once more.
RUNNER = """\
import json, subprocess, sys
if __name__ == "__main__":
    ns = {"__name__": "__main__"}
    with open(sys.argv[1]) as f:
        page = json.load(f)
    for block in page:
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
        "s3.md",
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
        "https.md",
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
    if page in S3_PAGES:
        from tests.s3_server import CREDENTIALS

        server = request.getfixturevalue("s3_server")
        client = server.client()
        if S3_PAGES[page] not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
            client.create_bucket(Bucket=S3_PAGES[page])
        env.update(CREDENTIALS, AWS_ENDPOINT_URL_S3=server.url, AWS_EC2_METADATA_DISABLED="true")
    if page in HUB_PAGES:
        server = request.getfixturevalue("web_server")
        hub_corpus(server.hub, HUB_PAGES[page])
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            env.pop(name, None)
        env.update(
            HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1"
        )
    (tmp_path / "blocks.json").write_text(json.dumps(runnable(page)))
    (tmp_path / "run_page.py").write_text(RUNNER)
    work = tmp_path / "work"
    before = checkout(work)
    result = subprocess.run(
        [sys.executable, str(tmp_path / "run_page.py"), str(tmp_path / "blocks.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"{page}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    # Issue 47: a page's own code forked a process that runs JAX (a DataLoader's workers).
    assert "os.fork() was called" not in result.stderr, f"{page}:\n{result.stderr[-6000:]}"
    if page in CLEAN_IN_A_CHECKOUT:
        assert git_status(work) == before, f"{page} wrote files git sees: ignore them or move them"


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


def hub_corpus(hub, repo: str) -> None:
    """`repo` on the test Hub: four Parquet files of 100 rows (text "document i", label i % 3)
    as data/train-0000K-of-00004.parquet, and a card."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {"README.md": b"# A corpus for the docs\n"}
    for k in range(4):
        ids = range(100 * k, 100 * (k + 1))
        table = pa.table({"text": [f"document {i}" for i in ids], "label": [i % 3 for i in ids]})
        out = io.BytesIO()
        pq.write_table(table, out, row_group_size=25)
        files[f"data/train-{k:05d}-of-00004.parquet"] = out.getvalue()
    hub.create(repo)
    hub.commit(repo, files)


def checkout(folder: pathlib.Path) -> str:
    """`folder` made a git repository with the checkout's .gitignore; its `git status`."""
    folder.mkdir()
    shutil.copy(ROOT / ".gitignore", folder / ".gitignore")
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return git_status(folder)


def git_status(folder: pathlib.Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The site as `mkdocs build --strict` writes it."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python", reason="pip install -e '.[dev]'")
    folder = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-6000:]
    return folder


@pytest.mark.slow
def test_mkdocs_build_strict(site):
    reference = (site / "reference" / "dataset" / "index.html").read_text()
    assert "from_array_record" in reference and "&gt;&gt;&gt;" in reference  # rendered docstrings
    assert "<blockquote" not in reference and "doctest" not in reference  # examples as code


# Modules whose `__all__` is public: each of its names is on a page of the API reference, as
# is each name that the README, the guides and the examples import from tpufeed.
PUBLIC_MODULES = [
    "tpufeed",
    "tpufeed.codec",
    "tpufeed.checkpoint",
    "tpufeed.beam",
    "tpufeed.transforms",
    "tpufeed.adapters.jax",
    "tpufeed.adapters.tf",
    "tpufeed.adapters.torch",
    "tpufeed.adapters.keras",
    "tpufeed.run.hosts.agreement",
    "tpufeed.run.metrics",
]
NOT_IN_REFERENCE = {
    "tpufeed.cli.quickstart.build": "the quickstart's digits, written for its page's second example",
}
IMPORT = re.compile(r"^\s*from (tpufeed(?:\.\w+)*) import \(?([\w ,\n]+?)\)?$", re.M)


def module_path(module: str) -> pathlib.Path:
    """The file of `module` in the checkout (tpufeed.transforms is installed from transforms/)."""
    parts = module.split(".")[1:]
    base = ROOT / "transforms" / pathlib.Path(*parts[1:]) if parts[:1] == ["transforms"] else None
    base = base or ROOT / "tpufeed" / pathlib.Path(*parts)
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def exported(module: str) -> list[str]:
    tree = ast.parse(module_path(module).read_text())
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0]) == "__all__":
            return [f"{module}.{name}" for name in ast.literal_eval(statement.value)]
    raise AssertionError(f"{module} has no __all__")


def imported_by_docs() -> set[str]:
    """Every `from tpufeed... import name` in the README, the guides and the examples."""
    texts = [ROOT / "README.md", *(DOCS / page for page in GUIDES), *ROOT.glob("examples/*.py")]
    return {
        f"{module}.{name.split(' as ')[0].strip()}"
        for path in texts
        for module, names in IMPORT.findall(path.read_text())
        for name in names.replace("\n", ",").split(",")
        if name.strip()
    }


def shown(name: str, ids: set[str]) -> bool:
    """Whether the reference renders `name`, at that path or where it is defined in a module
    below it (`tpufeed.TpufeedError` as `tpufeed.errors.TpufeedError`)."""
    if name in ids:
        return True
    module, _, attr = name.rpartition(".")
    return any(
        found.startswith(module + ".")
        and found.endswith("." + attr)
        and module_path(found.removesuffix("." + attr)).exists()
        for found in ids
    )


@pytest.mark.slow
def test_every_public_name_is_in_the_api_reference(site):
    ids = {
        found
        for page in (site / "reference").rglob("index.html")
        for found in re.findall(r'<h\d id="([^"]+)" class="doc doc-heading"', page.read_text())
    }
    public = {name for module in PUBLIC_MODULES for name in exported(module)}
    public |= imported_by_docs() - set(NOT_IN_REFERENCE)
    assert "tpufeed.sources.array_record.write_array_records" in public  # the README's
    missing = sorted(name for name in public if not shown(name, ids))
    assert not missing, f"add to a page of docs/reference/: {missing}"


@pytest.mark.slow
def test_signatures_are_formatted_and_link_their_types(site):
    """mkdocs.yml's `line_length` and `signature_crossrefs`: ruff (the dev extra) formats each
    signature, one parameter a line where it is long, and its types link to their pages."""
    signatures = [
        (page, code)
        for page in (site / "reference").rglob("index.html")
        for code in re.findall(
            r'class="doc-signature highlight"><pre><span></span><code>(.*?)</code>',
            page.read_text(),
            re.S,
        )
    ]
    text = {code: html.unescape(re.sub(r"<[^>]+>", "", code)) for _, code in signatures}
    wide = [line for shown in text.values() for line in shown.splitlines() if len(line) > 80]
    assert not wide, f"signatures wider than line_length: {wide}"
    parquet = next(shown for shown in text.values() if shown.startswith("from_parquet("))
    assert parquet.startswith("from_parquet(\n    paths: PathsLike,\n"), parquet
    iterator = next(code for code in text if text[code].startswith("iterator("))
    assert 'href="#tpufeed.DatasetIterator"' in iterator, iterator


# What a page's column shows without scrolling (Material's content column, both sidebars shown,
# code at 0.68rem): about 80 characters. Diagrams keep within this many.
DIAGRAM_COLUMNS = 76


def test_diagrams_fit_the_column():
    wide = [
        f"{b['where']}: {max(map(len, b['code'].splitlines()))} characters"
        for page in GUIDES
        for b in blocks(page)
        if b["lang"] in ("", "text")
        and max(map(len, b["code"].splitlines() or [""])) > DIAGRAM_COLUMNS
    ]
    assert not wide, f"narrow these to {DIAGRAM_COLUMNS} characters: {wide}"


def test_the_cli_reference_is_written_from_the_parser():
    result = subprocess.run(
        [sys.executable, str(DOCS / "generate_cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    page = (DOCS / "reference" / "cli.md").read_text()
    for command in ("quickstart", "inspect", "bench", "build", "cache"):
        assert f"## tpufeed {command}" in page and f"`tpufeed.{command}" in page
