"""WebDataset as its users write it: msgpack, tenbin and cbor fields decoded as WebDataset's own
decoders decode them, `{a..b}` brace ranges, `::` and `file:` URLs as WebDataset expands them,
and gzip shards (.tgz, .tar.gz: WebDataset's own test shards are) decompressed once into a
checked copy and read from it in place. Shards are written by webdataset's `TarWriter` and by
`tarfile`'s gzip, as WebDataset's test data are; the other side is `webdataset` itself.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpufeed
from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    MissingDependencyError,
    SourceNotFoundError,
)
from tpufeed.sources.webdataset import cbor as our_cbor
from tpufeed.sources.webdataset import copies, tenbin
from tpufeed.sources.webdataset.urls import braces, shard_paths

wds = pytest.importorskip("webdataset")
cbor = pytest.importorskip("cbor")  # WebDataset's cbor decoder
braceexpand = pytest.importorskip("braceexpand")  # WebDataset's brace expansion


def _sample(i: int) -> dict:
    return {
        "__key__": f"s{i:04d}",
        "mp": {"i": i, "f": [1.5, "é", b"\x00\x01"], "none": None},
        "msg": [i, True, {"k": -i}],
        "ten": [np.arange(i % 4 + 1, dtype=np.float32), np.full((2, 3), i, np.int64)],
        "tb": [np.zeros((0, 2), np.uint8)],
        "cbor": {"i": i, "big": 2**70 + i, "list": [1.25, None, "x" * i], "bytes": b"ab"},
        "txt": f"text {i}",
        "cls": i % 3,
    }


def _same(a, b) -> bool:
    """Values equal as WebDataset gives them: arrays by dtype, shape and values."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _theirs(paths: list[str]) -> list[dict]:
    pipeline = wds.WebDataset(paths, shardshuffle=False).decode()
    return [{k: v for k, v in s.items() if k != "__local_path__"} for s in pipeline]


def _write(path: Path, first: int = 0, count: int = 6) -> str:
    with wds.TarWriter(str(path)) as sink:  # .tgz: TarWriter gzips it itself
        for i in range(first, first + count):
            sink.write(_sample(i))
    return str(path)


def _tgz(tar: str, path: Path) -> str:
    """`tar` rewritten as `tarfile` writes a gzip tar ("w:gz"), as WebDataset's test .tgz are."""
    with tarfile.open(tar) as src, tarfile.open(path, "w:gz") as out:
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member))
    return str(path)


@pytest.fixture
def shards(tmp_path) -> list[str]:
    return [_write(tmp_path / f"train-{k:03d}.tar", 6 * k) for k in range(3)]


def test_msgpack_tenbin_and_cbor_fields_decode_as_webdataset_decodes_them(shards):
    ours = list(tpufeed.Dataset.from_webdataset(shards))
    theirs = _theirs(shards)
    assert len(ours) == len(theirs) == 18
    for a, b in zip(ours, theirs):
        assert _same(a, b), (a, b)
    assert ours[7]["ten"][1].shape == (2, 3) and ours[7]["cbor"]["big"] == 2**70 + 7


def test_undecoded_they_are_the_members_bytes(shards):
    ours = list(tpufeed.Dataset.from_webdataset(shards, decode=False))
    theirs = [
        {k: v for k, v in s.items() if k != "__local_path__"}
        for s in wds.WebDataset(shards, shardshuffle=False)
    ]
    assert all(_same(a, b) for a, b in zip(ours, theirs))


def test_a_missing_msgpack_is_named_with_its_package(shards, monkeypatch):
    monkeypatch.setitem(sys.modules, "msgpack", None)  # `import msgpack` raises ImportError
    with pytest.raises(MissingDependencyError, match=r"train-000.tar: member s0000.mp is msgpack"):
        tpufeed.Dataset.from_webdataset(shards)
    with pytest.raises(MissingDependencyError, match=r"pip install msgpack"):
        tpufeed.Dataset.from_webdataset(shards)
    assert len(tpufeed.Dataset.from_webdataset(shards, decode=False)) == 18  # bytes need none


def _one_field(tmp_path: Path, field: str, data: bytes) -> str:
    path = tmp_path / f"{field}.tar"
    with tarfile.open(path, "w") as out:
        info = tarfile.TarInfo(f"k.{field}")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
    return str(path)


TENBIN = bytes(wds.tenbin.encode_buffer([np.arange(6, dtype=np.int32).reshape(2, 3)]))
BAD_FIELDS = {
    "ten: cut": ("ten", TENBIN[:-70]),
    "ten: no magic": ("ten", b"x" * 16 + TENBIN[16:]),
    "ten: a length past the end": ("ten", TENBIN[:8] + (1 << 40).to_bytes(8, "little")),
    "ten: a shape past its data": (
        "ten",
        TENBIN.replace(np.int64(3).tobytes() + b"\0" * 8, np.int64(1 << 50).tobytes() + b"\0" * 8),
    ),
    "cbor: 2**32 items in 9 bytes": ("cbor", bytes.fromhex("9b0000000100000000")),
    "cbor: a string past the end": ("cbor", bytes.fromhex("5a7fffffff00")),
    "cbor: nested past its depth": ("cbor", b"\x81" * 5000 + b"\x00"),
    "cbor: cut": ("cbor", bytes.fromhex("a26161")),
    "mp: cut": ("mp", bytes.fromhex("dd7fffffff")),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_a_bad_field_is_named_without_holding_what_it_declares(tmp_path, case):
    field, data = BAD_FIELDS[case]
    ds = tpufeed.Dataset.from_webdataset(_one_field(tmp_path, field, data))
    with pytest.raises(CorruptDataError, match=rf"sample 0 \(key 'k'\): member k.{field} "):
        list(ds)


def test_tenbin_reads_uint32_which_webdataset_writes_under_a_misspelt_name():
    header = np.array([int.from_bytes(b"u4".ljust(8, b"\0"), "little"), 0, 1, 2], "<i8")
    data = np.array([7, 2**32 - 1], "<u4")
    chunks = b"".join(
        b"~TenBin~" + len(c).to_bytes(8, "little") + c + b"\0" * (-len(c) % 64)
        for c in (header.tobytes(), data.tobytes())
    )
    (array,) = tenbin.decode(chunks)
    assert array.dtype == np.uint32 and array.tolist() == [7, 2**32 - 1]


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_cbor_values_are_what_the_cbor_package_gives(value):
    data = cbor.dumps(value)
    assert _same(our_cbor.decode(data), cbor.loads(data))


@pytest.mark.parametrize(
    "hexed",
    [
        "5f42010243030405ff",  # bytes in chunks
        "7f657374726561646d696e67ff",  # text in chunks
        "9f018202039f0405ffff",  # indefinite arrays
        "bf61610161629f0203ffff",  # an indefinite map
        "f93c00",  # a half float
        "f90001",
        "f7",  # undefined
        "c11a514b67b0",  # a date: a Tag, as the compiled decoder leaves it
        "d8236461 2e2a62",  # a regular expression: a Tag too
        "c349010000000000000000",  # a negative big integer
    ],
)
def test_cbor_forms_and_tags_are_what_the_cbor_package_gives(hexed):
    data = bytes.fromhex(hexed.replace(" ", ""))
    ours, theirs = our_cbor.decode(data), cbor.loads(data)
    if isinstance(theirs, cbor.Tag):
        assert ours == (theirs.tag, theirs.value)
    else:
        assert _same(ours, theirs)


_PIECES = ["a", "0", "1", "9", "-", ".", ",", "{", "}", "\\", "..", "{0..3}", "{a..c}", "{1,2}"]
_PIECES += ["\\\\", "\\{", "\\,"]
_PIECES += ["{07..10}", "{3..1}", "{a..g..2}", "{Z..b}", "{2..-1}", "{1..10..3}", "{}", "{x}"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8))
def test_brace_expansion_is_braceexpands(pieces):
    pattern = "".join(pieces)
    try:
        expected = list(braceexpand.braceexpand(pattern))
    except braceexpand.UnbalancedBracesError:
        with pytest.raises(InvalidArgumentError, match="unbalanced braces"):
            braces(pattern)
    else:
        assert braces(pattern) == expected


def test_shard_lists_are_webdatasets():
    urls = "train-{000000..000012}.tar::val/v-{a..c}-{0,1}.tar"
    assert shard_paths(urls) == wds.shardlists.expand_urls(urls)
    assert shard_paths(Path("x-{1..2}.tar")) == [Path("x-{1..2}.tar")]  # a Path is a path
    with pytest.raises(InvalidArgumentError, match="more than the"):
        shard_paths("x-{0..99999999999}.tar")


def test_brace_ranges_and_file_urls_read_the_shards_webdataset_reads(shards, tmp_path, monkeypatch):
    pattern = str(tmp_path / "train-{000..002}.tar")
    assert list(tpufeed.Dataset.from_webdataset(pattern).map(lambda s: s["__key__"])) == [
        f"s{i:04d}" for i in range(18)
    ]
    urls = f"file://{tmp_path}/train-{{000..001}}.tar::file:{tmp_path}/train-002.tar"
    ours = list(tpufeed.Dataset.from_webdataset(urls))
    assert all(
        map(
            _same,
            [{**s, "__url__": None} for s in ours],
            [{**s, "__url__": None} for s in _theirs(shards)],
        )
    )
    monkeypatch.chdir(tmp_path)
    assert len(tpufeed.Dataset.from_webdataset("file:train-{000..002}.tar")) == 18
    assert len(tpufeed.Dataset.from_webdataset([f"file://localhost{tmp_path}/train-000.tar"])) == 6
    with pytest.raises(SourceNotFoundError, match="train-003.tar"):
        tpufeed.Dataset.from_webdataset("train-{000..003}.tar")
    with pytest.raises(InvalidArgumentError, match="host 'elsewhere'"):
        tpufeed.Dataset.from_webdataset("file://elsewhere/data/a.tar")


@pytest.mark.parametrize("writer", ["tarfile", "TarWriter"])
@pytest.mark.parametrize("suffix", [".tgz", ".tar.gz"])
def test_gzip_shards_read_as_webdataset_reads_them(tmp_path, writer, suffix):
    paths = []
    for k in range(2):
        path = tmp_path / f"part-{k}{suffix}"
        if writer == "TarWriter":
            paths.append(_write(path, 6 * k))
        else:
            paths.append(_tgz(_write(tmp_path / f"plain-{k}.tar", 6 * k), path))
    ours = list(tpufeed.Dataset.from_webdataset(paths, cache_dir=tmp_path / "cache"))
    theirs = _theirs(paths)
    assert len(ours) == 12 and all(map(_same, ours, theirs))
    assert [p.suffix for p in (tmp_path / "cache" / "wds").iterdir()] == [".tar", ".tar"]


def test_a_gzip_shard_is_decompressed_once_then_read_in_place(tmp_path, monkeypatch):
    path = _tgz(_write(tmp_path / "plain.tar"), tmp_path / "d.tgz")
    made = []
    real = copies._decompress
    monkeypatch.setattr(copies, "_decompress", lambda *a: made.append(a[-1]) or real(*a))
    first = tpufeed.Dataset.from_webdataset(path, cache_dir=tmp_path / "c").shuffle(seed=1)
    again = tpufeed.Dataset.from_webdataset(path, cache_dir=tmp_path / "c").shuffle(seed=1)
    assert made == [path]  # the second open found the checked copy
    keys = [s["__key__"] for s in first]
    assert sorted(keys) == [f"s{i:04d}" for i in range(6)]
    it = again.iterator()
    head = [next(it)["__key__"] for _ in range(2)]
    rest = [s["__key__"] for s in again.iterator(it.get_state())]
    assert head + rest == keys


@pytest.mark.multiprocess
def test_workers_read_the_copy_and_refuse_a_shard_replaced_since(tmp_path):
    path = _tgz(_write(tmp_path / "plain.tar"), tmp_path / "d.tgz")
    ds = tpufeed.Dataset.from_webdataset(path, cache_dir=tmp_path / "c").map(lambda s: s["__key__"])
    assert list(ds.workers(2, isolate=True)) == [f"s{i:04d}" for i in range(6)]
    other = _tgz(_write(tmp_path / "other.tar", 100), tmp_path / "other.tgz")
    os.replace(other, path)
    with pytest.raises(CorruptDataError, match="d.tgz"):  # each worker opens it again
        list(ds.workers(2, isolate=True))


@pytest.mark.parametrize("how", ["cut", "crc", "length"])
def test_a_damaged_gzip_shard_is_named_and_leaves_no_copy(tmp_path, how):
    data = bytearray(Path(_tgz(_write(tmp_path / "plain.tar"), tmp_path / "d.tgz")).read_bytes())
    if how == "cut":
        data = data[: len(data) // 2]
    else:  # gzip's trailer: CRC-32, then the length modulo 2**32
        data[-8 if how == "crc" else -4] ^= 0xFF
    (tmp_path / "d.tgz").write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match=r"d.tgz: its gz stream"):
        tpufeed.Dataset.from_webdataset(str(tmp_path / "d.tgz"), cache_dir=tmp_path / "c")
    assert not list((tmp_path / "c" / "wds").iterdir())


def test_other_compressions_are_refused_with_what_to_do(tmp_path):
    plain = Path(_write(tmp_path / "plain.tar"))
    path = tmp_path / "d.tar.bz2"
    with tarfile.open(plain) as src, tarfile.open(path, "w:bz2") as out:
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member))
    with pytest.raises(CorruptDataError, match=r"bzip2-compressed tar.*bunzip2 d.tar.bz2"):
        tpufeed.Dataset.from_webdataset(str(path), cache_dir=tmp_path / "c")


PEAK = """
import json, sys
import tpufeed

def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

tpufeed.Dataset.from_webdataset(sys.argv[3], cache_dir=sys.argv[2])  # the modules loaded
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kib("VmRSS")
ds = tpufeed.Dataset.from_webdataset(sys.argv[1], cache_dir=sys.argv[2], decode=False)
print(json.dumps({"samples": len(ds), "growth": (kib("VmHWM") - before) * 1024}))
"""


@pytest.mark.multiprocess
def test_a_large_shard_is_decompressed_in_bounded_memory(tmp_path):
    """64 MiB of zeros in one member, gzipped to about 64 KiB: copied and checked with the
    process growing by under 24 MiB (1 MiB pieces decompressed; the copy's CRC32C check reads
    8 MiB at a time), not by the 64 MiB it holds."""
    path = tmp_path / "big.tgz"
    with tarfile.open(path, "w:gz") as out:
        info = tarfile.TarInfo("k.bin")
        info.size = 64 << 20
        out.addfile(info, open("/dev/zero", "rb"))
    assert path.stat().st_size < 1 << 20
    small = _tgz(_write(tmp_path / "plain.tar"), tmp_path / "small.tgz")
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(path), str(tmp_path / "c"), small],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["samples"] == 1 and result["growth"] < 24 << 20, result


def test_a_stream_past_what_deflate_can_make_is_refused(tmp_path, monkeypatch):
    """The bound: no more than MAX_RATIO bytes out per byte in (lowered here to see it hold)."""
    path = _tgz(_write(tmp_path / "plain.tar"), tmp_path / "d.tgz")
    monkeypatch.setattr(copies, "MAX_RATIO", 2)
    with pytest.raises(CorruptDataError, match="a stream of its size can make"):
        tpufeed.Dataset.from_webdataset(path, cache_dir=tmp_path / "c")
    assert not list((tmp_path / "c" / "wds").iterdir())


def test_gzip_fields_inside_a_plain_tar_still_decode(tmp_path):
    path = tmp_path / "f.tar"
    with tarfile.open(path, "w") as out:
        for name, data in [("a.json.gz", gzip.compress(b'{"x": 1}')), ("a.cbor", cbor.dumps([1]))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    assert all(map(_same, list(tpufeed.Dataset.from_webdataset(str(path))), _theirs([str(path)])))


@pytest.mark.emulator
def test_gzip_shards_in_a_bucket_are_decompressed_from_the_cached_copy(
    gcs, bucket, upload, tmp_path
):
    """gs:// .tgz shards, named by a brace range: each is copied into the shard cache, then
    decompressed from that copy, keyed by the object's generation; with no cache, refused."""
    for k in range(2):
        plain = _write(tmp_path / f"plain-{k}.tar", 6 * k)
        upload(bucket, f"wds/part-{k}.tgz", _tgz(plain, tmp_path / f"part-{k}.tgz"))
    gcs.set_faults(error_503=0.05, seed=7)  # retried away
    urls = f"gs://{bucket}/wds/part-{{0..1}}.tgz"
    ds = tpufeed.Dataset.from_webdataset(urls, cache_dir=tmp_path / "c")
    ours = list(ds)
    theirs = _theirs([str(tmp_path / f"part-{k}.tgz") for k in range(2)])
    assert [s["__url__"] for s in ours][::6] == [f"gs://{bucket}/wds/part-{k}.tgz" for k in (0, 1)]
    assert all(_same({**a, "__url__": None}, {**b, "__url__": None}) for a, b in zip(ours, theirs))
    assert len(ours) == 12 and len(list((tmp_path / "c" / "wds").glob("*.tar"))) == 2
    with pytest.raises(InvalidArgumentError, match=r"part-0.tgz: a gzip tar .* give cache_bytes"):
        tpufeed.Dataset.from_webdataset(urls, cache_dir=tmp_path / "c0", cache_bytes=0)
