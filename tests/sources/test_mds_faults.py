"""Dataset.from_mds against outside bytes (issue 43): every field of index.json, damaged indexes
drawn by Hypothesis, a FIFO in place of each file it opens, a shard cut at every header
boundary, and seeded byte flips across a shard's header, offset table and first sample. Each
case ends in Streaming's records or a named tpufeed error, within the test's time bound.

Every shard is MosaicML Streaming's own MDSWriter's (tests/data/mds/: write_fixtures.py)."""

from __future__ import annotations

import json
import os
import pathlib
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.faults.budget import examples
from tests.faults.json_mutations import mutated
from tests.sources.mds_data import (
    DATA,
    EXPECTED,
    TRUST_EXPECTED,
    assert_like_streaming,
    copy_of,
    edit_index,
    tagged,
)
from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceError, TpufeedError
from tpufeed.sources.mds.source import MDSSource
from tpufeed.storage.derived import derived_name
from tpufeed.storage.opener import FileIdentity

pytestmark = pytest.mark.timeout(120)  # a hang fails the test


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUFEED_CACHE_DIR", str(tmp_path / "cache"))


def column(i: int, encoding, size="keep"):
    """An index edit: shard 0's column `i` given `encoding` (and `size`)."""

    def edit(index):
        shard = index["shards"][0]
        shard["column_encodings"][i] = encoding
        if size != "keep":
            shard["column_sizes"][i] = size

    return edit


def shard0(**fields):
    return lambda index: index["shards"][0].update(fields)


# The zstd fixture's columns: id int (8), img jpeg, text str, vec ndarray:float32:4 (16).
@pytest.mark.parametrize(
    "edit, error, message",
    [
        (column(3, "ndarray:float99:4"), CorruptDataError, r"'vec': ndarray encoding 'float99:4'"),
        (column(3, "ndarray:float32:a,b"), CorruptDataError, r"'vec': ndarray shape 'a,b'"),
        (column(3, "ndarray:float32:4,"), CorruptDataError, r"'vec': ndarray shape '4,'"),
        (column(3, "ndarray:float32:4:1"), CorruptDataError, r"'vec': ndarray encoding"),
        (column(3, "ndarray:float32:" + "9" * 40), CorruptDataError, r"'vec': ndarray shape"),
        (column(3, "ndarray:"), InvalidArgumentError, r"'vec' has encoding 'ndarray:', which"),
        (column(3, "ndarray:float32:4", 12), CorruptDataError, r"'vec' \(ndarray:float32:4\) has"),
        (column(0, "int", None), CorruptDataError, r"'id' \(int\) has size None .* takes 8"),
        (column(2, "str", 5), CorruptDataError, r"'text' \(str\) has size 5 .* each sample"),
        (column(1, ["jpeg"]), CorruptDataError, r"'img' has encoding \['jpeg'\], not a string"),
        (column(2, "pkl"), InvalidArgumentError, r"'text' is 'pkl'"),
        (shard0(column_names=[5, "img", "text", "vec"]), CorruptDataError, r"column_names \[5"),
        (shard0(column_names=["id", "id", "t", "v"]), CorruptDataError, r"must be distinct"),
        (shard0(column_sizes=[8, None, None, -4]), CorruptDataError, r"'vec' has size -4"),
        (shard0(samples=2**70), CorruptDataError, r"samples is 1180591620717411303424, not"),
        (shard0(compression=7), CorruptDataError, r"compression is 7, not a string"),
        (shard0(compression="br"), InvalidArgumentError, r"compression 'br' is not read"),
        (shard0(raw_data=[1]), CorruptDataError, r"raw_data is \[1\], not an object"),
        (shard0(zip_data=None), CorruptDataError, r"zip_data is None, not an object"),
        (
            lambda i: i["shards"][0]["zip_data"].update(bytes=-1),
            CorruptDataError,
            r"zip_data\.bytes is -1, not a count",
        ),
        (
            lambda i: i["shards"][0]["raw_data"].update(hashes={"xxh3_64": 5}),
            CorruptDataError,
            r"raw_data\.hashes is \{'xxh3_64': 5\}, not an object of hex digests",
        ),
        (
            lambda i: i["shards"][0]["raw_data"].update(basename="shard.0\x00.mds"),
            CorruptDataError,
            r"shard path 'shard\.0\\x00\.mds' contains a NUL byte",
        ),
        (
            lambda i: i["shards"][0]["raw_data"].update(basename="../plain/shard.00000.mds"),
            CorruptDataError,
            r"escapes the dataset root",
        ),
    ],
)
def test_every_index_field_is_checked_naming_index_shard_column_and_value(
    tmp_path, edit, error, message
):
    folder = copy_of("zstd", tmp_path)
    edit_index(folder, edit)
    with pytest.raises(error, match=message) as caught:
        MDSSource(folder)
    assert f"{folder / 'index.json'} shard 0: " in str(caught.value)


def test_a_number_past_pythons_digits_limit_is_named(tmp_path):
    folder = copy_of("zstd", tmp_path)
    edit_index(folder, shard0(samples=123454321))
    text = (folder / "index.json").read_text().replace("123454321", "9" * 5000)
    (folder / "index.json").write_text(text)
    with pytest.raises(CorruptDataError, match=r"index\.json: not an MDS index: .*digits"):
        MDSSource(folder)


def read_all(folder: pathlib.Path) -> list[dict]:
    source = MDSSource(folder)
    return [source[i] for i in range(len(source))]


def assert_streamings_own(records: list[dict], expected: list[dict]) -> None:
    """Records an accepted damaged index gave: each one of Streaming's (its id says which),
    each once, in order; a renamed column is compared by its place."""
    ids = [int(next(iter(r.values()))) for r in records]
    assert ids == sorted(set(ids)) and set(ids) <= {int(e["id"]["__int__"]) for e in expected}
    by_id = {int(e["id"]["__int__"]): e for e in expected}
    for record, i in zip(records, ids):
        theirs = [by_id[i][n] for n in sorted(by_id[i])]  # in the index's order (MDSWriter's)
        assert [tagged(m, t) for m, t in zip(record.values(), theirs)] == theirs


@pytest.mark.parametrize("name", ["zstd", "trust/twins-a"])
@examples(40)  # 40 in the suite, more under tests/fuzz_all.sh
@given(data=st.data())
def test_a_damaged_index_reads_right_or_raises_a_named_error(tmp_path_factory, name, data):
    tmp_path = tmp_path_factory.mktemp("index")
    folder = copy_of(name, tmp_path)
    index = json.loads((folder / "index.json").read_text())
    damaged = data.draw(mutated(index), label="index")
    (folder / "index.json").write_text(json.dumps(damaged, allow_nan=True))
    try:
        records = read_all(folder)
    except TpufeedError as error:
        assert str(error)
        return
    expected = EXPECTED["zstd"] if name == "zstd" else TRUST_EXPECTED["twins-a"]
    assert_streamings_own(records, expected)


# --- a FIFO where a file should be ------------------------------------------------------------


def fifo_at(path: pathlib.Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("where", ["index.json", "sub index.json", "shard", "twin", "copy lock"])
def test_a_fifo_in_place_of_any_file_is_refused_without_blocking(tmp_path, where):
    if where == "sub index.json":
        folder = copy_of("nested", tmp_path)
        fifo_at(folder / "part-b" / "index.json")
    elif where == "twin":
        folder = copy_of("trust/twins-a", tmp_path)
        fifo_at(folder / "shard.00000.mds")
    else:
        folder = copy_of("zstd", tmp_path)
        if where in ("index.json", "shard"):
            fifo_at(folder / ("index.json" if where == "index.json" else "shard.00000.mds.zstd"))
    if where == "copy lock":
        shard = folder / "shard.00000.mds.zstd"
        name = derived_name(str(shard), FileIdentity.of(os.stat(shard)), ".raw")
        (tmp_path / "cache" / "mds").mkdir(parents=True)
        fifo_at(tmp_path / "cache" / "mds" / f"{name}.lock")
    with pytest.raises(SourceError, match=r"(is a FIFO|is not a regular file)"):
        read_all(folder)


# --- a shard cut at every header boundary -------------------------------------------------------


def boundaries(data: bytes) -> dict[str, int]:
    """Where an MDS shard's header parts end, and points inside each."""
    count = int.from_bytes(data[:4], "little")
    offsets = np.frombuffer(data, "<u4", count + 1, 4).tolist()
    table_end = 8 + 4 * count
    return {
        "empty": 0,
        "inside the count": 2,
        "after the count": 4,
        "inside the offsets": 4 + 2 * (count + 1) + 1,
        "after the offsets": table_end,
        "inside the config JSON": (table_end + offsets[0]) // 2,
        "after the config JSON": offsets[0],
        "inside the first sample": offsets[0] + 5,
        "after the first sample": offsets[1],
        "one byte short": len(data) - 1,
    }


CUTS = list(boundaries((DATA / "plain" / "shard.00000.mds").read_bytes()))


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("told", [False, True])
def test_a_shard_cut_at_every_header_boundary_is_refused(tmp_path, cut, told):
    """Cut, with its index as written (the size differs) or told the cut size and without
    hashes (the header itself must tell): the shard's records raise, naming it; the other
    shards' records are read."""
    folder = copy_of("plain", tmp_path)
    shard = folder / "shard.00000.mds"
    data = shard.read_bytes()
    shard.write_bytes(data[: boundaries(data)[cut]])
    if not told:
        with pytest.raises(CorruptDataError, match=r"shard\.00000\.mds: [\d,]+ bytes, the index"):
            MDSSource(folder)
        return

    def tell(index):
        index["shards"][0]["raw_data"].update(bytes=shard.stat().st_size, hashes={})

    edit_index(folder, tell)
    source = MDSSource(folder)
    for i in range(3):
        with pytest.raises(CorruptDataError, match=rf"shard\.00000\.mds record {i}"):
            source[i]
    assert_like_streaming([source[i] for i in range(3, 9)], EXPECTED["plain"][3:])


@pytest.mark.parametrize("cut", CUTS[1:])
def test_a_twin_cut_anywhere_is_passed_over_for_the_compressed_shard(tmp_path, cut):
    folder = copy_of("trust/twins-a", tmp_path)
    twin = folder / "shard.00000.mds"
    data = twin.read_bytes()
    twin.write_bytes(data[: boundaries(data)[cut]])
    assert_like_streaming(read_all(folder), TRUST_EXPECTED["twins-a"])


@pytest.mark.parametrize("at", [0, 2, 4, 6, 0.5, -4, -1])
def test_a_compressed_shard_cut_anywhere_is_refused(tmp_path, at):
    folder = copy_of("zstd", tmp_path)
    shard = folder / "shard.00001.mds.zstd"
    data = shard.read_bytes()
    end = int(len(data) * at) if isinstance(at, float) else at % len(data)
    shard.write_bytes(data[:end])
    edit_index(folder, lambda i: i["shards"][1]["zip_data"].update(bytes=end, hashes={}))
    source = MDSSource(folder)
    with pytest.raises(CorruptDataError, match=r"shard\.00001\.mds\.zstd"):
        source[5]
    assert_like_streaming([source[i] for i in range(5)], EXPECTED["zstd"][:5])


# --- seeded byte flips across the header, the offsets and the first sample ---------------------


@pytest.mark.parametrize("hashed", [True, False])
def test_byte_flips_in_a_shards_header_end_in_its_records_or_named_errors(tmp_path, hashed):
    """150 seeded flips (1 to 3 bits) in the count and offset table, the first sample's column
    sizes, or anywhere from the start to the first sample's end (config JSON and columns), of
    an uncompressed shard with every column type. With its hashes, every damaged shard is
    refused; without them (the header alone tells), each record reads right or raises a named
    error: never another exception, never a hang."""
    folder = copy_of("plain", tmp_path)
    if not hashed:
        edit_index(folder, lambda i: [s["raw_data"].update(hashes={}) for s in i["shards"]])
    shard = folder / "shard.00000.mds"
    pristine = shard.read_bytes()
    parts = boundaries(pristine)
    index = json.loads((folder / "index.json").read_text())
    variable = index["shards"][0]["column_sizes"].count(None)
    sizes_end = parts["after the config JSON"] + 4 * variable  # the first sample's sizes
    regions = [  # where a flip lands: the count and offsets, the sizes, anywhere in the header
        (0, parts["after the offsets"]),
        (parts["after the config JSON"], sizes_end),
        (0, parts["after the first sample"]),
    ]
    rng = random.Random(43)
    refused = 0
    for _ in range(150):
        data = bytearray(pristine)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(*rng.choice(regions))] ^= 1 << rng.randrange(8)
        shard.write_bytes(bytes(data))
        source = MDSSource(folder)
        for i in range(3):
            try:
                record = source[i]  # anything but a named error fails the test
            except TpufeedError as error:
                assert "shard.00000.mds" in str(error)
                refused += 1
                continue
            if hashed or data == pristine:  # flips that cancel out leave the shard whole
                assert data == pristine, f"a damaged shard was read: record {i}"
                assert_like_streaming([record], [EXPECTED["plain"][i]])
    assert refused >= (400 if hashed else 200), refused  # the seed's cases: 450 and 269
