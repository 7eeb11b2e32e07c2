"""hf://datasets/... against the test server laid out as the Hugging Face Hub (HF_ENDPOINT
pointing at it through the fault proxy): revisions, globs through the paged tree API, reads
through resolve URLs and the CDN they redirect to, tokens, history that moves or is rewritten
(storage/stores/hub.py)."""

from __future__ import annotations

import os

import pytest

from tpufeed.errors import (
    InvalidArgumentError,
    ObjectChangedError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.storage import backends
from tpufeed.storage.local import expand_paths
from tpufeed.storage.retry import RetryPolicy

pytestmark = pytest.mark.emulator

REPO = "org/name"
ROOT = f"hf://datasets/{REPO}"


@pytest.fixture
def repo(hub):
    hub.create(REPO)
    files = {
        "README.md": b"# a card\n",
        "data/train-0.parquet": os.urandom(3000),
        "data/train-1.parquet": os.urandom(2000),
        "data/test-0.parquet": os.urandom(500),
        "data/extra/deep.parquet": b"deep" * 10,
        "other/train-0.parquet": b"x" * 10,
    }
    sha = hub.commit(REPO, files)
    return files, sha


def test_globs_go_through_the_paged_tree_listing(repo, hub, web_server):
    hub.page_size = 2
    assert expand_paths(f"{ROOT}/data/train-*.parquet") == [
        f"{ROOT}/data/train-0.parquet",
        f"{ROOT}/data/train-1.parquet",
    ]
    assert expand_paths(f"{ROOT}/data/**.parquet")[0] == f"{ROOT}/data/extra/deep.parquet"
    assert expand_paths(f"{ROOT}/*/train-?.parquet")[-1] == f"{ROOT}/other/train-0.parquet"
    trees = [p for m, p, _ in web_server.requests if "/tree/" in p]
    assert any("cursor=" in p for p in trees)  # the listing came in pages


def test_a_file_is_known_by_its_content_hash_and_commit(repo):
    files, sha = repo
    obj = backends.stat(f"{ROOT}/data/train-0.parquet")
    assert (obj.scheme, obj.bucket, obj.name) == ("hf", f"datasets/{REPO}", "data/train-0.parquet")
    assert obj.size == 3000 and obj.revision == sha and obj.crc32c is None
    import hashlib

    assert obj.etag == f'"{hashlib.sha256(files["data/train-0.parquet"]).hexdigest()}"'
    card = backends.stat(f"{ROOT}/README.md")  # not in LFS: its git blob id
    assert card.etag.strip('"') != hashlib.sha256(files["README.md"]).hexdigest()
    assert card.content_version != obj.content_version > 0


def test_revisions_branches_commits_and_encoded_refs(repo, hub):
    files, first = repo
    second = hub.commit(REPO, {"data/train-0.parquet": b"new" * 10}, branch="main")
    hub.repos[REPO].refs["refs/convert/parquet"] = first
    assert backends.stat(f"{ROOT}/data/train-0.parquet").size == 30
    assert backends.stat(f"{ROOT}@{first}/data/train-0.parquet").size == 3000
    converted = backends.stat(f"hf://datasets/{REPO}@refs%2Fconvert%2Fparquet/data/train-0.parquet")
    assert converted.size == 3000 and converted.revision == first
    assert converted.url == f"hf://datasets/{REPO}@refs%2Fconvert%2Fparquet/data/train-0.parquet"
    assert second != first


def test_bad_paths_missing_files_and_folders_are_named(repo):
    with pytest.raises(InvalidArgumentError, match="hf://datasets/ORG/NAME/PATH"):
        expand_paths("hf://org/name/x.parquet")
    with pytest.raises(InvalidArgumentError, match="is a folder"):
        expand_paths(f"{ROOT}/data")
    with pytest.raises(SourceNotFoundError, match="nope.parquet: no such file at commit"):
        expand_paths(f"{ROOT}/data/nope.parquet")
    with pytest.raises(SourceNotFoundError, match="no file matches the glob"):
        expand_paths(f"{ROOT}/nowhere/*.parquet")
    with pytest.raises(SourceNotFoundError, match=r"not found \(HTTP 404\)"):
        expand_paths("hf://datasets/org/missing/x.parquet")


def test_reads_follow_the_cdn_redirect_and_read_in_place(repo, web):
    files, _ = repo
    big = backends.stat(f"{ROOT}/data/train-0.parquet")
    assert backends.read_range(big, 100, 200) == files["data/train-0.parquet"][100:200]
    card = backends.stat(f"{ROOT}/README.md")
    assert backends.read_range(card, 2, 7) == files["README.md"][2:7]
    paths = [p.split("?")[0] for p, _ in web.counters.media]
    assert any(p.startswith("/cdn/") for p in paths)  # LFS: through the CDN
    assert any(p.endswith("/resolve/" + big.revision + "/README.md") for p in paths)


def test_a_token_goes_to_the_hub_and_never_to_the_cdn(hub, web, web_server, monkeypatch, tmp_path):
    hub.create("org/private", private=True, token="hf_secret")
    hub.commit("org/private", {"d/x.parquet": b"private bytes" * 100})
    url = "hf://datasets/org/private/d/x.parquet"
    with pytest.raises(SourceError, match=r"permission denied \(HTTP 401\).*HF_TOKEN"):
        backends.stat(url)
    token_file = tmp_path / "token"
    token_file.write_text("hf_secret\n")
    monkeypatch.setenv("HF_TOKEN_PATH", str(token_file))  # what `hf auth login` saved
    obj = backends.stat(url)
    # The CDN on another host name: the token must not follow the redirect there.
    hub.cdn_base = f"http://localhost:{web.port}"
    assert backends.read_range(obj, 0, 13) == b"private bytes"
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    hub.cdn_base = ""  # the same host: the token goes with the redirect, the CDN refuses it
    with pytest.raises(SourceError, match="HTTP 400"):
        backends.read_range(obj, 0, 13, RetryPolicy(attempts=1))
    assert hub.leaked_credentials == 1
    sent = [h for _, p, h in web_server.requests if "/cdn/" in p]
    assert "authorization" not in sent[0]


def test_a_branch_that_moves_on_changes_nothing_read(repo, hub):
    files, first = repo
    obj = backends.stat(f"{ROOT}/data/train-1.parquet")
    hub.commit(REPO, {"data/train-1.parquet": os.urandom(2000)})
    assert backends.read_range(obj, 0, 50) == files["data/train-1.parquet"][:50]
    hub.forget(REPO, first)  # history rewritten: the listed commit is gone
    with pytest.raises(ObjectChangedError, match=f"listed at commit {first}, which the Hub"):
        backends.read_range(obj, 0, 50)


def test_listings_and_reads_survive_faults(repo, web):
    files, _ = repo
    web.set_faults(error_503=0.2, reset=0.1, cut=0.1, stall=0.05, delay_s=1.0, seed=5)
    policy = RetryPolicy(timeout_s=0.3, initial_backoff_s=0.01)
    for _ in range(5):
        objs = backends.list_objects(f"{ROOT}/data/*.parquet", policy)
        assert [o.name for o in objs] == [
            "data/test-0.parquet",
            "data/train-0.parquet",
            "data/train-1.parquet",
        ]
    blob = files["data/train-0.parquet"]
    obj = objs[1]
    for start in range(0, 3000, 300):
        assert backends.read_range(obj, start, start + 300, policy) == blob[start : start + 300]
    assert web.counters.faults > 5


def test_a_listing_too_big_is_refused_by_name(repo, hub, web_server, monkeypatch):
    from tpufeed.storage.stores import hub as hub_module

    monkeypatch.setattr(hub_module, "_LISTING_BYTES", 100)
    with pytest.raises(SourceError, match="Body too large"):
        expand_paths(f"{ROOT}/data/*.parquet")
