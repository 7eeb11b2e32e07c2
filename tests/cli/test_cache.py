"""`tpufeed cache ls` and `tpufeed cache clear` on a cache filled from the GCS emulator (their
mistakes, a read-only disk or a folder that cannot be made: test_edges.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.gcs_emulator import upload_shards
from tpufeed.cli import main
from tpufeed.sources.array_record import ArrayRecordSource
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.stores.gcs import list_objects


@pytest.mark.emulator
def test_cache_ls_and_clear(gcs, bucket, upload, tmp_path, capsys):
    url, records = upload_shards(upload, bucket, "cli", 3, 150)
    cache_dir = tmp_path / "c"
    source = ArrayRecordSource(url, cache=ShardCache(cache_dir))
    source.__getitems__(np.arange(len(source)))
    source.close()  # a copy open in a reader is in use
    assert main(["cache", "ls", "--dir", str(cache_dir)]) == 0
    out = capsys.readouterr().out
    objects = list_objects(url)
    for obj in objects:
        assert obj.url in out
    total = sum(o.size for o in objects)
    assert f"3 shards, {total:,} bytes in {cache_dir}" in out
    first = objects[0]
    with ShardCache(cache_dir).pinned(first):
        assert main(["cache", "clear", "--dir", str(cache_dir)]) == 0
        out = capsys.readouterr().out
    assert f"({total - first.size:,} bytes of shards)" in out and "1 entry in use" in out
    assert [e.url for e in ShardCache(cache_dir).entries()] == [first.url]
    assert main(["cache", "clear", "--dir", str(cache_dir)]) == 0
    assert ShardCache(cache_dir).entries() == [] and ShardCache(cache_dir).usage() == 0
    capsys.readouterr()
    assert main(["cache", "ls"]) == 0  # the default directory: $TPUFEED_CACHE_DIR (set by `gcs`)
    assert f"0 shards, 0 bytes in {os.environ['TPUFEED_CACHE_DIR']}" in capsys.readouterr().out


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_dir_is_a_usage_error_not_the_current_directory(
    empty, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main(["cache", "clear", "--dir", empty])
    assert exit_info.value.code == 2
    assert "expected a directory, got an empty string" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_cache_help_names_every_store_that_shares_the_cache():
    """Issue 47: `cache --help` said gs:// though s3://, https:// and hf:// share the cache."""
    from tpufeed.cli.program import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    words = " ".join(sub.choices["cache"].format_help().split())
    assert "gs://, s3://, https:// and hf:// files" in words
    assert "local shard cache of remote files" in parser.format_help()


def test_a_dir_that_does_not_exist_is_named_not_listed_as_empty(tmp_path, capsys):
    """Issue 47: `cache ls --dir` with a missing (mistyped) folder said "0 shards", exit 0."""
    from tpufeed.cli.program import main

    for action in ("ls", "clear"):
        assert main(["cache", action, "--dir", str(tmp_path / "typo")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tpufeed: error: --dir {tmp_path / 'typo'} does not exist, so it ")
        assert "$TPUFEED_CACHE_DIR" in err and not (tmp_path / "typo").exists()


def test_the_default_cache_before_any_read_is_empty_and_says_why(tmp_path, monkeypatch, capsys):
    from tpufeed.cli.program import main

    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "never"))
    assert main(["cache", "ls"]) == 0
    out = capsys.readouterr().out
    assert (
        out
        == f"0 shards, 0 bytes in {tmp_path / 'never'} (no cache there yet: nothing was read through it)\n"
    )
