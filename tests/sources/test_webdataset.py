"""WebDataset tar shards read in place: the samples, order and values WebDataset itself gives,
the cached sample index, shuffles and resume, refusals and damaged tars."""

from __future__ import annotations

import gzip
import io
import lzma
import os
import tarfile

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import CorruptDataError
from tpufeed.sources.webdataset import tar as tar_module
from tpufeed.sources.webdataset.tar import TarShard

wds = pytest.importorskip("webdataset")

SAMPLES = 40


def _sample(i: int) -> dict:
    return {
        "__key__": f"split.v1/{i:05d}",  # a '.' in the directory stays in the key
        "txt": f"caption {i} é",
        "cls": i % 7,
        "json": {"i": i, "tags": ["a", "b"][: i % 3]},
        "npy": np.arange(i % 5, dtype=np.float32).reshape(-1, 1),
        "seg.txt": f"seg {i}",  # a field of two parts decodes by its last
        "jpg": b"\xff\xd8\xff" + bytes([i]),  # images stay bytes, as in wds .decode()
        "bin": os.urandom(i % 11),
    }


@pytest.fixture
def shards(tmp_path) -> list[str]:
    """Shards written by webdataset.ShardWriter itself, 9 samples each (the last has 4)."""
    with wds.ShardWriter(str(tmp_path / "train-%03d.tar"), maxcount=9, verbose=0) as sink:
        for i in range(SAMPLES):
            sink.write(_sample(i))
    return sorted(str(p) for p in tmp_path.glob("train-*.tar"))


def _wds(paths: list[str], decode: bool = True) -> list[dict]:
    """WebDataset's own samples, in its order without a shuffle (its cache's `__local_path__`
    is its own, not part of a sample)."""
    pipeline = wds.WebDataset(paths, shardshuffle=False)
    samples = pipeline.decode() if decode else pipeline
    return [{k: v for k, v in s.items() if k != "__local_path__"} for s in samples]


def _same(a: dict, b: dict) -> bool:
    if list(a) != list(b):
        return False
    for key, value in a.items():
        other = b[key]
        if type(value) is not type(other):
            return False
        if isinstance(value, np.ndarray):
            if value.dtype != other.dtype or not np.array_equal(value, other):
                return False
        elif value != other:
            return False
    return True


def _all_same(ours: list[dict], theirs: list[dict]) -> bool:
    return len(ours) == len(theirs) and all(map(_same, ours, theirs))


@pytest.mark.parametrize("decode", [True, False])
def test_same_samples_in_the_same_order_as_webdataset(shards, decode):
    ours = list(tpufeed.Dataset.from_webdataset(shards, decode=decode))
    assert _all_same(ours, _wds(shards, decode))
    assert ours[3]["cls"] == 3 if decode else ours[3]["cls"] == b"3"
    assert ours[12]["__url__"] == shards[1]


def _tar(path, members: list[tuple[str, bytes | None]], format=tarfile.GNU_FORMAT) -> str:
    """A tar of `members` (data None: a directory), written by tarfile."""
    with tarfile.open(path, "w", format=format) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


LONG = "deep/" * 30 + "x" * 120  # over 100 characters: a GNU long name or a pax header


@pytest.mark.parametrize("format", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_grouping_follows_webdataset_on_odd_member_lists(tmp_path, format):
    members = [
        ("__meta__", b"skipped"),
        ("__index__/a.txt", b"skipped too"),
        ("dir", None),
        ("dir/a.txt", b"a"),
        ("dir/a.CLS", b"1"),  # fields are lowercased
        ("dir/b.txt", b"b"),
        ("dir/a.json", b'{"again": true}'),  # a key seen again later: a sample of its own
        ("noextension", b"skipped: no '.' in its last part"),
        ("dir/a.txt", b"a2"),  # a field again, but in the new sample: fine
        ("v.1/.hidden", b"h"),
        ("x.tar.gz.bin", b"z"),
    ]
    if format != tarfile.USTAR_FORMAT:
        members += [(LONG + ".txt", b"long"), (LONG + ".cls", b"5"), ("ünï/cödé.txt", b"u")]
    path = _tar(tmp_path / "odd.tar", members, format)
    ours = list(tpufeed.Dataset.from_webdataset(path))
    theirs = _wds([path])
    assert _all_same(ours, theirs)
    assert [s["__key__"] for s in ours][:3] == ["dir/a", "dir/b", "dir/a"]


def test_a_repeated_field_in_one_sample_is_refused_as_webdataset_does(tmp_path):
    path = _tar(tmp_path / "dup.tar", [("k.txt", b"a"), ("k.TXT", b"b")])
    with pytest.raises(ValueError, match="duplicate"):
        _wds([path])
    with pytest.raises(CorruptDataError, match=r"dup.tar: member 'k.TXT' repeats field 'txt'"):
        tpufeed.Dataset.from_webdataset(path)


def test_global_shuffle_is_exactly_once_and_resumes_exactly(shards):
    ds = tpufeed.Dataset.from_webdataset(shards).shuffle(seed=3).map(lambda s: s["__key__"])
    epoch = list(ds)
    assert sorted(epoch) == sorted(s["__key__"] for s in _wds(shards))
    assert epoch != sorted(epoch)
    batched = ds.batch(4).repeat(2)
    it = iter(batched)
    head = [next(it).tolist() for _ in range(13)]  # into the second epoch
    state = it.get_state()
    rest = [b.tolist() for b in it]
    assert [b.tolist() for b in batched.iterator(state)] == rest
    assert sum(map(len, head + rest)) == 2 * SAMPLES
    hosts = [list(ds.shard(h, 3)) for h in range(3)]
    assert sorted(k for h in hosts for k in h) == sorted(epoch)


@pytest.mark.multiprocess
def test_workers_give_what_one_process_gives(shards):
    ds = (
        tpufeed.Dataset.from_webdataset(shards)
        .shuffle(seed=1)
        .map(lambda s: (s["__key__"], s["cls"]))
    )
    assert list(ds.workers(2)) == list(ds)


@pytest.fixture
def count_scans(monkeypatch):
    calls: list[str] = []
    real = tar_module.scan_tar

    def counting(read, path, *args):
        calls.append(path)
        return real(read, path, *args)

    monkeypatch.setattr(tar_module, "scan_tar", counting)
    return calls


def test_index_is_cached_and_rebuilt_when_the_shard_changes(shards, count_scans):
    tpufeed.Dataset.from_webdataset(shards)
    assert count_scans == shards
    assert all(os.path.exists(p + ".wds.tpufeed-index") for p in shards)
    assert len(tpufeed.Dataset.from_webdataset(shards + [shards[0] + "*"])) == SAMPLES + 9
    assert count_scans == shards  # the glob skipped the index file; nothing rescanned
    with wds.TarWriter(shards[0]) as sink:  # rewritten: other samples, another size and mtime
        sink.write({"__key__": "new", "txt": "fresh"})
    again = tpufeed.Dataset.from_webdataset(shards)
    assert count_scans == shards + [shards[0]]
    assert again.source[0]["txt"] == "fresh"
    stat = os.stat(shards[1])
    os.utime(shards[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: same size
    tpufeed.Dataset.from_webdataset(shards)
    assert count_scans == shards + [shards[0], shards[1]]


def test_index_dir_and_a_damaged_index(shards, tmp_path, count_scans):
    index_dir = tmp_path / "indexes"
    shard = TarShard(shards[0], index_dir=index_dir)
    assert shard.index_path and shard.index_path.startswith(str(index_dir))
    with open(shard.index_path, "r+b") as f:
        f.truncate(100)
    with pytest.warns(UserWarning, match="no whole trailer.*made again"):
        assert len(TarShard(shards[0], index_dir=index_dir)) == 9
    assert count_scans == [shards[0], shards[0]]


@pytest.mark.parametrize("field", ["pyd", "pickle", "seg.pkl", "pth.gz"])
def test_pickles_are_refused_by_name_unless_undecoded(tmp_path, field):
    path = _tar(tmp_path / "p.tar", [("s1.txt", b"x"), (f"s1.{field}", b"\x80\x04K\x01.")])
    with pytest.raises(CorruptDataError, match=rf"member s1\.{field} is a pickle .*decode=False"):
        tpufeed.Dataset.from_webdataset(path)
    assert tpufeed.Dataset.from_webdataset(path, decode=False).source[0][field] == (
        b"\x80\x04K\x01."
    )


def test_gzipped_fields_decode_by_their_inner_extension(tmp_path):
    path = _tar(
        tmp_path / "g.tar",
        [("a.json.gz", gzip.compress(b'{"x": 1}')), ("a.gz", gzip.compress(b"raw"))],
    )
    assert _all_same(list(tpufeed.Dataset.from_webdataset(path)), _wds([path]))


def test_a_gzipped_field_is_bounded_as_it_decompresses_and_checked(tmp_path, monkeypatch):
    """A .gz field that would decompress past the bound is refused before it is held (a gzip
    bomb of a few MB makes GBs), naming the shard, sample and member; a truncated one too."""
    from tpufeed.sources.webdataset import fields

    monkeypatch.setattr(fields, "MAX_GZ_FIELD_BYTES", 100)
    path = _tar(
        tmp_path / "b.tar",
        [("a.txt.gz", gzip.compress(b"x" * 100)), ("b.txt.gz", gzip.compress(b"x" * 101))],
    )
    ds = tpufeed.Dataset.from_webdataset(path)
    assert ds.source[0]["txt.gz"] == "x" * 100  # at the bound: read
    with pytest.raises(
        CorruptDataError, match=r"b\.tar: sample 1 .*member b\.txt\.gz .*more than 100 bytes"
    ):
        ds.source[1]
    cut = _tar(tmp_path / "c.tar", [("a.json.gz", gzip.compress(b'{"x": 1}')[:-4])])
    with pytest.raises(CorruptDataError, match=r"member a\.json\.gz .*gzip stream ends early"):
        tpufeed.Dataset.from_webdataset(cut).source[0]


def test_compressed_tar_is_refused_with_what_to_do(shards, tmp_path):
    """gzip tars are read through a copy (test_webdataset_users.py); the others are refused."""
    path = tmp_path / "train.tar.xz"
    with open(shards[0], "rb") as f:
        path.write_bytes(lzma.compress(f.read()))
    with pytest.raises(CorruptDataError, match=r"xz-compressed tar.*unxz train.tar.xz"):
        tpufeed.Dataset.from_webdataset(str(path))


def test_undecodable_field_names_shard_sample_and_member(tmp_path):
    path = _tar(tmp_path / "bad.tar", [("a.cls", b"1"), ("b.cls", b"one")])
    ds = tpufeed.Dataset.from_webdataset(path)
    with pytest.raises(CorruptDataError, match=r"bad.tar: sample 1 \(key 'b'\): member b.cls "):
        list(ds)


def _cut(path: str, keep: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


@pytest.mark.parametrize("where", ["header", "data"])
def test_truncated_tar_names_file_and_member(shards, where):
    last = list(tarfile.open(shards[0]))[-1]  # the last sample's bin, of 8 bytes
    _cut(shards[0], last.offset + 256 if where == "header" else last.offset_data + 4)
    cause = "a header cut off" if where == "header" else "its data is cut off"
    with pytest.raises(CorruptDataError, match=rf"train-000.tar: the tar is truncated .*{cause}"):
        tpufeed.Dataset.from_webdataset(shards[0])


def test_damaged_header_mid_shard_is_an_error_not_an_early_end(shards):
    members = list(tarfile.open(shards[0]))
    with open(shards[0], "r+b") as f:  # a header's checksum field, 4 samples in
        f.seek(members[4 * 7].offset + 148)
        f.write(b"99999999")
    theirs = _wds([shards[0]])  # WebDataset ends the shard quietly there
    assert len(theirs) < 9
    with pytest.raises(CorruptDataError, match=r"after member '.*00003\.\w+'.*damaged header"):
        tpufeed.Dataset.from_webdataset(shards[0])


def test_not_a_tar_and_empty_file(tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"this is not a tar archive" * 40)
    with pytest.raises(CorruptDataError, match="junk.tar: not a tar file"):
        tpufeed.Dataset.from_webdataset(str(junk))
    empty = _tar(tmp_path / "empty.tar", [])
    assert len(TarShard(empty)) == 0


def test_shard_truncated_after_indexing_fails_on_read(shards):
    ds = tpufeed.Dataset.from_webdataset(shards[0])
    shard = ds.source.files[0]
    start, length = shard._span(8)
    _cut(shards[0], start + length - 1)
    with pytest.raises(CorruptDataError, match="changed since it was first opened"):
        ds.source[8]


@pytest.mark.emulator
@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_gs_shards_through_the_cache_or_by_ranges(
    gcs, bucket, upload, shards, tmp_path, cache_bytes
):
    for path in shards:
        upload(bucket, f"wds/{os.path.basename(path)}", path)
    gcs.set_faults(error_503=0.05, seed=5)  # retried away
    ds = tpufeed.Dataset.from_webdataset(
        f"gs://{bucket}/wds/train-*.tar", cache_dir=tmp_path / "c", cache_bytes=cache_bytes
    )
    ours = list(ds)
    theirs = _wds(shards)
    assert [s["__url__"] for s in ours][:1] == [f"gs://{bucket}/wds/train-000.tar"]
    for s in theirs:
        s["__url__"] = f"gs://{bucket}/wds/" + os.path.basename(s["__url__"])
    assert _all_same(ours, theirs)
    shuffled = [s["__key__"] for s in ds.shuffle(seed=2)]
    assert sorted(shuffled) == sorted(s["__key__"] for s in theirs)
