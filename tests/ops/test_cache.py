"""`cache()`: every epoch of a cached pipeline is the uncached pipeline's, item for item, with
0 or 2 workers and on resume; each record is made once; what it refuses, and why.

The source is real ArrayRecord files; the stage before the cache logs each call to a file, so
that the records made are counted across worker processes.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.array_record import write_array_records

RECORDS = 24


@pytest.fixture
def paths(tmp_path) -> list[str]:
    out = []
    for i in range(2):
        out.append(str(tmp_path / f"part-{i}.array_record"))
        write_array_records(out[-1], [b"%d" % r for r in range(i * 12, i * 12 + 12)])
    return out


def decoder(log: str, scale: float = 1.0):
    def decode(data: bytes) -> dict:
        with open(log, "a") as f:
            f.write(data.decode() + "\n")
        value = int(data)
        return {
            "image": (np.arange(12, dtype=np.float32) * value * scale).reshape(3, 4),
            "label": value,
            "name": b"r%d" % value,
            "weight": np.float32(value / 2),
        }

    return decode


def augment(element: dict, rng: np.random.Generator) -> dict:
    out = dict(element)
    out["image"] = element["image"] + rng.random((3, 4), dtype=np.float32)
    out["flip"] = int(rng.integers(2))
    return out


def pipelines(paths, tmp_path, cache: bool = True, max_bytes: int = 1 << 30, scale=1.0):
    log = str(tmp_path / "made.log")
    ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=7).map(decoder(log, scale))
    if cache:
        ds = ds.cache(str(tmp_path / "cache"), max_bytes=max_bytes)
    return ds.random_map(augment).batch(5).repeat(3)


def made(tmp_path) -> list[int]:
    path = tmp_path / "made.log"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 2])
def test_every_epoch_is_the_uncached_pipelines_and_each_record_is_made_once(
    paths, tmp_path, workers
):
    want = list(pipelines(paths, tmp_path, cache=False))
    os.remove(tmp_path / "made.log")
    got = list(pipelines(paths, tmp_path).workers(workers))
    assert_same(got, want)
    assert sorted(made(tmp_path)) == list(range(RECORDS))  # epochs 2 and 3 read entries
    again = list(pipelines(paths, tmp_path).workers(workers))  # a new job: a warm cache
    assert_same(again, want)
    assert len(made(tmp_path)) == RECORDS


@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_taken_mid_epoch_resumes_with_or_without_the_cache(paths, tmp_path, workers):
    want = list(pipelines(paths, tmp_path, cache=False))
    cached = pipelines(paths, tmp_path).workers(workers)
    it = iter(cached)
    for _ in range(7):  # into the second epoch (5 batches an epoch)
        next(it)
    state = it.get_state()
    it.close()
    assert_same(list(cached.iterator(state)), want[7:])
    assert_same(list(pipelines(paths, tmp_path, cache=False).iterator(state)), want[7:])
    uncached_state = iter(pipelines(paths, tmp_path, cache=False)).get_state()
    assert_same(list(cached.iterator(uncached_state)), want)
    assert cached.fingerprint() == pipelines(paths, tmp_path, cache=False).fingerprint()


def test_flat_map_and_filter_before_the_cache_keep_their_pieces(paths, tmp_path):
    def pipeline(cache: bool):
        ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=3).map(int)
        ds = ds.filter(lambda v: v % 5 != 0).flat_map(lambda v: [v] * (v % 3))
        if cache:
            ds = ds.cache(str(tmp_path / "cache"), max_bytes=1 << 20)
        return ds.random_map(lambda v, rng: (v, float(rng.random()))).repeat(2)

    want = list(pipeline(False))
    assert list(pipeline(True)) == want
    it = iter(pipeline(True))
    for _ in range(len(want) // 2 + 1):
        next(it)
    assert list(pipeline(True).iterator(it.get_state())) == want[len(want) // 2 + 1 :]


def test_what_does_not_fit_is_made_again_and_the_limit_holds(paths, tmp_path):
    want = list(pipelines(paths, tmp_path, cache=False))
    os.remove(tmp_path / "made.log")
    limit = 2500  # room for some of the 24 entries (about 300 bytes each)
    assert_same(list(pipelines(paths, tmp_path, max_bytes=limit)), want)
    entries = [
        os.path.join(root, name)
        for root, _, names in os.walk(tmp_path / "cache")
        for name in names
        if name.isdigit()
    ]
    assert 0 < len(entries) < RECORDS
    assert sum(os.path.getsize(path) for path in entries) <= limit
    assert len(made(tmp_path)) == len(entries) + 3 * (RECORDS - len(entries))  # 3 epochs


def test_a_damaged_entry_is_made_again_with_a_warning(paths, tmp_path, caplog):
    want = list(pipelines(paths, tmp_path, cache=False))
    list(pipelines(paths, tmp_path))
    (entry,) = [
        os.path.join(root, "5") for root, _, names in os.walk(tmp_path / "cache") if "5" in names
    ]
    with open(entry, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = len(made(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tpufeed.cache"):
        assert_same(list(pipelines(paths, tmp_path)), want)
    assert "record 5" in caplog.text and "CRC32C" in caplog.text
    assert made(tmp_path)[before:] == [5]  # made again once, then read from its new entry


def test_another_function_or_source_makes_new_entries(paths, tmp_path):
    list(pipelines(paths, tmp_path))
    list(pipelines(paths, tmp_path, scale=2.0))  # a constant the function closes over
    assert len(made(tmp_path)) == 2 * RECORDS
    scaled = list(pipelines(paths, tmp_path, cache=False, scale=2.0))
    assert_same(list(pipelines(paths, tmp_path, scale=2.0)), scaled)
    write_array_records(paths[0], [b"%d" % (r + 100) for r in range(12)])  # the data changed
    got = list(pipelines(paths, tmp_path))
    assert_same(got, list(pipelines(paths, tmp_path, cache=False)))
    assert {int(label) for batch in got for label in batch["label"]} >= {100, 111}


def test_values_keep_their_types(tmp_path):
    rows = [b"a", "b", 3, 2.5, True, np.arange(3), np.int16(4), {"k": np.float64(1.5)}]
    ds = tpufeed.Dataset.from_sequence(rows).cache(str(tmp_path), max_bytes=1 << 20)
    for _ in range(2):
        got = list(ds)
        for a, b in zip(got[:5], rows):
            assert type(a) is type(b) and a == b
        assert np.array_equal(got[5], rows[5]) and got[5].flags.writeable
        assert type(got[6]) is np.int16 and got[6] == 4
        assert type(got[7]["k"]) is np.float64


def test_a_value_the_codec_cannot_store_is_named(tmp_path):
    ds = tpufeed.Dataset.from_sequence([1, 2]).map(lambda v: (v, v))
    with pytest.raises(InvalidArgumentError, match=r"record 0: .*a dict instead of a tuple"):
        list(ds.cache(str(tmp_path), max_bytes=1 << 20))


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda ds: ds.random_map(lambda v, rng: v), "random_map.*new numbers every epoch"),
        (lambda ds: ds.batch(2), "batch.*before pack and batch"),
        (lambda ds: ds.pack({"t": 4}), "pack.*before pack and batch"),
        (lambda ds: ds.cache("/tmp/x", 10), "cache: a pipeline caches once"),
    ],
)
def test_cache_after_a_stage_it_cannot_replay_is_refused(make, why):
    ds = make(tpufeed.Dataset.from_sequence([1, 2]))
    with pytest.raises(InvalidArgumentError, match=f"cache\\(\\) cannot come after {why}"):
        ds.cache("/tmp/x", max_bytes=10)


@pytest.mark.parametrize("directory, max_bytes", [(None, 10), ("/tmp/x", 0), ("/tmp/x", "1G")])
def test_bad_settings_are_named(directory, max_bytes):
    with pytest.raises(InvalidArgumentError, match=repr(max_bytes) if directory else "None"):
        tpufeed.Dataset.from_sequence([1]).cache(directory, max_bytes=max_bytes)


def test_a_mixture_is_cached_in_its_components(tmp_path):
    a = tpufeed.Dataset.from_sequence([1, 2])
    with pytest.raises(InvalidArgumentError, match="each component of a mixture"):
        tpufeed.Dataset.mix([a, a]).cache(str(tmp_path), max_bytes=10)


def test_a_record_that_fails_before_the_cache_is_skipped_every_epoch_and_never_stored(
    paths, tmp_path
):
    def pipeline(cache: bool):
        log = str(tmp_path / "made.log")
        decode = decoder(log)

        def fussy(data: bytes) -> dict:
            if data == b"3":
                raise ValueError("record 3 is bad")
            return decode(data)

        ds = tpufeed.Dataset.from_array_record(paths).map(fussy)
        if cache:
            ds = ds.cache(str(tmp_path / "cache"), max_bytes=1 << 20)
        return ds.random_map(augment).ignore_errors(5).repeat(2)

    want = list(pipeline(False))
    it = iter(pipeline(True))
    got = list(it)
    assert it.stats().errors == 2  # once an epoch
    assert len(got) == len(want) == 2 * (RECORDS - 1)
    for a, b in zip(got, want):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_indexing_element_spec_and_len_are_the_uncached_pipelines(paths, tmp_path):
    def pipeline(cache: bool):
        ds = tpufeed.Dataset.from_array_record(paths).shuffle(seed=2).map(decoder(os.devnull))
        if cache:
            ds = ds.cache(str(tmp_path / "cache"), max_bytes=1 << 20)
        return ds.random_map(augment).repeat(2)

    cached, plain = pipeline(True), pipeline(False)
    assert len(cached) == len(plain) == RECORDS  # one epoch
    assert cached.element_spec == plain.element_spec
    for i in (0, 5, RECORDS + 3):
        for _ in range(2):  # the second time from the entry
            a, b = cached[i], plain[i]
            assert all(np.array_equal(a[k], b[k]) for k in b)
