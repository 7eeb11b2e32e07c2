"""Bounded parsing: declared sizes checked first, decompression bounded, progress required, and
whatever bad bytes make a parser raise named as `CorruptDataError`."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest
import zstandard

from tpufeed.errors import CodecError, CorruptDataError
from tpufeed.storage.bounded import advancing, declared, decompressed, parsing

RAW = os.urandom(300_000) + bytes(700_000)
COMPRESS = {
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
    "gz": gzip.compress,
    "bz2": bz2.compress,
}


@pytest.mark.parametrize(
    "raised",
    [
        MemoryError(),
        OverflowError("int too large"),
        RecursionError("maximum recursion depth exceeded"),
        struct.error("unpack requires a buffer of 8 bytes"),
        ValueError("bad value"),
        TypeError("bad type"),
        IndexError("index out of range"),
        KeyError("field"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        json.JSONDecodeError("Expecting value", "x", 0),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_bad_bytes_make_a_parser_raise_is_named(raised):
    with pytest.raises(CorruptDataError) as caught:
        with parsing("data/x.tar", "the pax header", offset=1536, record=3):
            raise raised
    message = str(caught.value)
    assert message.startswith("data/x.tar: the pax header at byte 1,536 (record 3): ")
    assert type(raised).__name__ in message
    assert caught.value.path == "data/x.tar" and caught.value.record == 3


def test_tpufeed_errors_and_interrupts_pass_through():
    with pytest.raises(CodecError, match="own"):
        with parsing("x", "a field"):
            raise CodecError("own")
    with pytest.raises(KeyboardInterrupt):
        with parsing("x", "a field"):
            raise KeyboardInterrupt


def test_declared_sizes_are_checked_against_what_remains():
    assert declared(10, 10, "x", "a length") == 10
    with pytest.raises(
        CorruptDataError, match="x: a length at byte 4: declares 11 bytes where only 10 remain"
    ):
        declared(11, 10, "x", "a length", 4)
    with pytest.raises(CorruptDataError, match="declares -1 bytes, not a size"):
        declared(-1, 10, "x", "a length")


def test_a_step_that_does_not_advance_stops_the_parser():
    assert advancing(512, 1024, "x", "the next header") == 1024
    with pytest.raises(
        CorruptDataError, match="leads from byte 1,024 back to byte 512: it would loop"
    ):
        advancing(1024, 512, "x", "the next header")
    with pytest.raises(CorruptDataError, match="would loop"):
        advancing(512, 512, "x", "the next header")


@pytest.mark.parametrize("algorithm", sorted(COMPRESS))
def test_a_stream_decompresses_exactly(algorithm):
    pieces = list(decompressed(algorithm, io.BytesIO(COMPRESS[algorithm](RAW)), len(RAW), "x"))
    assert b"".join(pieces) == RAW
    assert max(len(p) for p in pieces) <= 1 << 20


@pytest.mark.parametrize("algorithm", ["gz", "bz2"])
def test_several_members_follow_one_another(algorithm):
    data = COMPRESS[algorithm](RAW[:1000]) + COMPRESS[algorithm](RAW[1000:])
    assert b"".join(decompressed(algorithm, io.BytesIO(data), len(RAW), "x")) == RAW


@pytest.mark.parametrize("algorithm", sorted(COMPRESS))
@pytest.mark.parametrize(
    "damage, words",
    [
        ("cut", "(cut off|decompresses to [0-9,]+ bytes, not)"),
        ("junk after", "(Invalid|incorrect|error|Unknown|unknown)"),
        ("declared less", "decompresses to more than the 999,999 bytes declared"),
        ("declared more", "decompresses to 1,000,000 bytes, not the 1,000,001 declared"),
    ],
)
def test_a_bad_stream_is_named(algorithm, damage, words):
    data = COMPRESS[algorithm](RAW)
    size = len(RAW)
    if damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "junk after":
        data += b"\x01junk that is no stream"
    elif damage == "declared less":
        size -= 1
    else:
        size += 1
    with pytest.raises(CorruptDataError, match=f"shard.bin: its {algorithm} stream: .*{words}"):
        b"".join(decompressed(algorithm, io.BytesIO(data), size, "shard.bin"))


BOMB = textwrap.dedent(
    """
    import io, sys, bz2, gzip, zstandard
    from tpufeed.errors import CorruptDataError
    from tpufeed.storage.bounded import decompressed
    algorithm = sys.argv[1]
    compress = {"zstd": zstandard.ZstdCompressor().compress, "gz": gzip.compress, "bz2": bz2.compress}
    one = compress[algorithm](bytes(1 << 20))
    bomb = one * 2048  # 2 GiB of zeros once decompressed, in 2048 frames, members or streams
    def peak_kib():  # VmHWM: ru_maxrss would start at the parent's peak (kept over fork, exec)
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
    before = peak_kib()
    try:
        for _ in decompressed(algorithm, io.BytesIO(bomb), 65536, "bomb.bin"):
            pass
    except CorruptDataError as error:
        print(error)
    after = peak_kib()
    print((after - before) // 1024)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(COMPRESS))
def test_a_decompression_bomb_stops_at_its_declared_size_in_little_memory(algorithm):
    out = subprocess.run(
        [sys.executable, "-c", BOMB, algorithm], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    message, grown_mib = out.stdout.strip().splitlines()
    assert "more than the 65,536 bytes declared" in message
    assert int(grown_mib) < 16, f"peak RSS grew by {grown_mib} MiB"
