"""A WebDataset shard's headers are walked within bounds: every number parsed strictly, every
declared size checked against the bytes left before anything is read for it, every step
forward. Damaged or crafted headers (a negative size that would step back, absurd pax and GNU
long-name sizes, nested extended headers, a cut anywhere, seeded byte flips) end in the right
samples or in a `CorruptDataError` naming the tar, the byte offset and the field: never a
hang, a stray `MemoryError` or `RecursionError`, or samples lost without a word. Over s3://
with no cache the same holds within a bounded number of ranged GETs."""

from __future__ import annotations

import io
import os
import random
import shutil
import tarfile

import numpy as np
import pytest

import tpufeed
from tests.sources.tar_damage import (
    BLOCK,
    CHECKSUM_FIELD,
    KINDS,
    SIZE_FIELD,
    base256,
    cut,
    fix_checksum,
    members,
    rewrite,
    wds,
    write_shard,
)
from tpufeed.errors import CorruptDataError
from tpufeed.sources.webdataset.tar import TarShard


def _loop(found: list, sample: int):
    """(the last member of `sample`, the first header of the sample before): a size leading
    from one to the other makes Python's `tarfile` go round those two samples forever."""
    return found[3 * sample + 2], found[3 * sample - 3].start


def _open(path: str, index_dir) -> TarShard:
    return TarShard(path, index_dir=index_dir, decode=False)


def _samples(shard: TarShard) -> list[dict]:
    """Its samples, without the `__url__` (the same samples from a copy compare equal)."""
    return [
        {k: v for k, v in s.items() if k != "__url__"} for s in shard.read(np.arange(len(shard)))
    ]


@pytest.mark.timeout(60)  # Python's tarfile, and so tpufeed before, loops here forever
@pytest.mark.parametrize("kind", KINDS)
def test_a_size_that_leads_back_is_a_named_error_not_a_loop(tmp_path, kind):
    path = write_shard(tmp_path / "train-000.tar", kind=kind)
    victim, target = _loop(members(path), 2)
    header = victim.data - BLOCK
    rewrite(path, header + SIZE_FIELD.start, base256(target - victim.data), header=header)
    with pytest.raises(CorruptDataError, match=rf"train-000.tar: .* at byte {header:,}: .*size"):
        _open(path, tmp_path / "i")


@pytest.mark.timeout(60)
def test_a_negative_pax_size_record_is_a_named_error_not_a_loop(tmp_path):
    path = write_shard(tmp_path / "train-000.tar", kind="wds")
    victim, target = _loop(members(path), 2)
    record = b"23 mtime=1700000000.25\n"
    data = victim.start + BLOCK  # the pax header's records
    with open(path, "rb") as f:
        f.seek(data)
        assert f.read(len(record)) == record
    back = b"-" + str(victim.data - target).encode().rjust(13, b"0")  # -0000000012800
    rewrite(path, data, b"23 size=%s\n" % back)  # as long as the record it replaces
    with pytest.raises(CorruptDataError, match=rf"at byte {victim.start:,}: .*'size' record"):
        _open(path, tmp_path / "i")


@pytest.mark.parametrize(
    "kind,field", [("wds", "pax header"), ("wds-long", "pax header"), ("gnu", "GNU long name")]
)
def test_absurd_extended_header_sizes_are_refused_before_reading(tmp_path, kind, field):
    path = write_shard(tmp_path / "train-000.tar", kind=kind)
    victim = members(path)[2]
    rewrite(path, victim.start + SIZE_FIELD.start, base256(2**80), header=victim.start)
    with pytest.raises(
        CorruptDataError,
        match=rf"train-000.tar: the size field of a {field} after member .* at byte "
        rf"{victim.start:,}: declares 1,208,925,819,614,629,174,706,176 bytes where only [\d,]+",
    ):
        _open(path, tmp_path / "i")


@pytest.mark.parametrize("kind", ["wds-long", "gnu"])
def test_thousands_of_nested_extended_headers_read_as_tar_reads_one(tmp_path, kind):
    path = write_shard(tmp_path / "train-000.tar", kind=kind)
    victim = members(path)[2]
    expected = _samples(_open(path, tmp_path / "before"))
    with open(path, "rb") as f:
        data = f.read()
    chain = data[victim.start : victim.data - BLOCK]  # its pax or GNU long-name header
    with open(path, "wb") as f:  # the same extended header 3000 times over
        f.write(data[: victim.start] + chain * 3000 + data[victim.start :])
    with pytest.raises(RecursionError), tarfile.open(path) as tar:
        tar.getmembers()
    got = _samples(_open(path, tmp_path / "after"))
    assert [s["__key__"] for s in got] == [s["__key__"] for s in expected]
    assert [s["bin"] for s in got] == [s["bin"] for s in expected]


def test_a_pax_record_longer_than_its_header_is_a_named_error(tmp_path):
    path = write_shard(tmp_path / "train-000.tar", kind="wds-long")
    victim = members(path)[1]
    rewrite(path, victim.start + BLOCK, b"999")  # "146 path=..." claims 999 bytes
    with pytest.raises(CorruptDataError, match=rf"at byte {victim.start:,}: .*pax record"):
        _open(path, tmp_path / "i")


def _cuts(path: str) -> tuple[list[int], list[int]]:
    """(cuts that lose data, cuts inside the end-of-archive marker that lose nothing)."""
    found = members(path)
    last = found[-1]
    end = last.data + -(-last.size // BLOCK) * BLOCK
    losing = {end}
    for m in found:
        losing |= {m.start, m.data - BLOCK, m.data - BLOCK + 100, m.data, m.data + 1}
    losing.discard(0)  # an empty file is not a tar at all
    return sorted(losing), [end + 1, end + BLOCK, os.path.getsize(path)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_at_every_header_boundary_is_a_named_error(tmp_path, kind):
    original = write_shard(tmp_path / "original.tar", kind=kind)
    expected = _samples(_open(original, tmp_path / "i"))
    losing, harmless = _cuts(original)
    path = str(tmp_path / "train-000.tar")
    for n, keep in enumerate(losing + harmless):
        shutil.copyfile(original, path)
        cut(path, keep)
        if keep in harmless:
            assert _samples(_open(path, tmp_path / f"i{n}")) == expected
            continue
        with pytest.raises(CorruptDataError, match=r"train-000.tar: the tar is (truncated|cut)"):
            _open(path, tmp_path / f"i{n}")


def _flip(original: str, path: str, rng: random.Random) -> int:
    """Copies `original` to `path` with one byte of one member's headers changed (its
    checksum fixed half the time): returns which member."""
    found = members(original)
    victim = rng.randrange(len(found))
    m = found[victim]
    at = rng.randrange(m.start, m.data)
    with open(original, "rb") as f:
        data = bytearray(f.read())
    data[at] = rng.choice([data[at] ^ (1 << rng.randrange(8)), rng.randrange(256)])
    header = at - (at - m.start) % BLOCK
    in_header = header in (m.start, m.data - BLOCK)  # not a pax header's or long name's data
    if in_header and rng.random() < 0.5 and not CHECKSUM_FIELD.start <= at - header < 156:
        fix_checksum(data, header)
    with open(path, "wb") as f:
        f.write(data)
    return victim


def _members_of(shard: TarShard) -> dict[int, tuple[str, int]]:
    index = shard.index
    names = {}
    for i, key in enumerate(index.keys):
        for m in range(int(index.first[i]), int(index.first[i + 1])):
            field = index.fields[int(index.field_ids[m])]
            names[int(index.offsets[m])] = (f"{key}.{field}", int(index.sizes[m]))
    return names


def check_flipped(original: str, path: str, victim: int, index_dir) -> str:
    """A flipped shard opens to a named error, or to the original's members, save the
    flipped one and the one after it (whose name a flipped type flag may have changed)."""
    try:
        shard = _open(path, index_dir)
    except CorruptDataError as error:
        assert os.path.basename(path) in str(error)
        return "error"
    found = members(original)
    got = _members_of(shard)
    flipped = found[victim]
    span = got.get(flipped.data, ("", 0))[1]  # a size flipped larger may hold later members
    loose = {m.data for m in found[victim : victim + 2]}
    loose |= {m.data for m in found if flipped.data < m.start < flipped.data + span}
    want = {m.data: (m.name, m.size) for m in found}
    assert set(got) - set(want) <= loose
    assert all(got.get(at) == name for at, name in want.items() if at not in loose)
    _samples(shard)  # every sample reads
    return "read"


@pytest.mark.timeout(120)  # the time bound of the fuzz: 4 x 150 cases
@pytest.mark.parametrize("kind", KINDS)
def test_seeded_byte_flips_over_headers_end_in_samples_or_a_named_error(tmp_path, kind):
    original = write_shard(tmp_path / "original.tar", kind=kind)
    path = str(tmp_path / "train-000.tar")
    rng = random.Random(f"tar flips {kind}")
    outcomes = []
    for case in range(150):
        victim = _flip(original, path, rng)
        outcomes.append(check_flipped(original, path, victim, tmp_path / f"i{case}"))
    assert 0 < outcomes.count("error") < len(outcomes)  # both ends were reached


# -- over s3:// with no cache: ranged GETs of the headers ------------------------------------


def _gets(s3, bucket: str) -> int:
    return sum(f"/{bucket}/" in path for path, _ in s3.counters.media)


def _over_s3(s3, s3_bucket, s3_upload, tmp_path, path: str, name: str):
    s3_upload(s3_bucket, name, path)
    s3.reset()
    return tpufeed.Dataset.from_webdataset(
        f"s3://{s3_bucket}/{name}", decode=False, cache_dir=tmp_path / "c", cache_bytes=0
    )


@pytest.mark.emulator
@pytest.mark.timeout(120)
def test_over_s3_a_size_that_leads_back_ends_within_a_few_ranged_gets(
    s3, s3_bucket, s3_upload, tmp_path
):
    path = write_shard(tmp_path / "train-000.tar", kind="wds", count=200)
    assert os.path.getsize(path) > 1 << 20
    victim, target = _loop(members(path), 198)
    header = victim.data - BLOCK
    rewrite(path, header + SIZE_FIELD.start, base256(target - victim.data), header=header)
    with pytest.raises(CorruptDataError, match=rf"train-000.tar: .* at byte {header:,}: .*size"):
        _over_s3(s3, s3_bucket, s3_upload, tmp_path, path, "train-000.tar")
    assert 0 < _gets(s3, s3_bucket) <= 2 + os.path.getsize(path) // (1 << 19)


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_over_s3_seeded_byte_flips_end_within_a_bounded_number_of_gets(
    s3, s3_bucket, s3_upload, tmp_path
):
    original = write_shard(tmp_path / "original.tar", kind="wds-long", count=200)
    bound = 2 + os.path.getsize(original) // (1 << 19)
    local = str(tmp_path / "train-000.tar")
    rng = random.Random("tar flips over s3")
    for case in range(24):
        victim = _flip(original, local, rng)
        name = f"flip{case}/train-000.tar"
        outcome = check_flipped(original, local, victim, tmp_path / f"i{case}")  # read locally
        try:
            ds = _over_s3(s3, s3_bucket, s3_upload, tmp_path, local, name)
        except CorruptDataError as error:
            assert f"s3://{s3_bucket}/{name}" in str(error) and outcome == "error"
        else:  # what the ranged GETs found is what the local file gives
            assert outcome == "read"
            assert _members_of(ds.source.files[0]) == _members_of(
                _open(local, tmp_path / f"j{case}")
            )
        assert _gets(s3, s3_bucket) <= bound


def _links_and_globals(path: str) -> str:
    """A pax tar, written by `tarfile`, with a global header first (as `git archive` writes),
    a folder, a symlink and a hard link (with a size field, as some writers leave it) among
    the samples."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "v1"}) as tar:
        for name, kind, data in [
            ("s/a.txt", tarfile.REGTYPE, b"first"),
            ("s", tarfile.DIRTYPE, b""),
            ("s/a.link", tarfile.SYMTYPE, b""),
            ("s/a.hard", tarfile.LNKTYPE, b""),
            ("s/a.cls", tarfile.REGTYPE, b"1"),
            ("s/b.txt", tarfile.REGTYPE, "second é".encode()),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.linkname = kind, len(data), "s/a.txt"
            if kind == tarfile.LNKTYPE:
                info.size = 5  # no data follows a link, whatever its size says
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def test_links_folders_and_a_global_header_group_as_webdataset_groups_them(tmp_path):
    path = _links_and_globals(str(tmp_path / "train-000.tar"))
    theirs = [
        {k: v for k, v in s.items() if k not in ("__local_path__", "__url__")}
        for s in wds.WebDataset([path], shardshuffle=False)
    ]
    assert _samples(_open(path, tmp_path / "i")) == theirs
    assert [s["__key__"] for s in theirs] == ["s/a", "s/b"]
