"""gs:// globs matched by GCS (`matchGlob`) against listed whole and matched here, in turns.

    python -m benchmarks.gcs_glob [--objects 10000] [--rounds 15]

Starts `gcp-storage-emulator` (tests/gcs_emulator.py; it implements `matchGlob`) and uploads
`--objects` small objects under one folder. For each glob, each round times both ways, the
order flipped every round:

  here     what tpufeed did before issue 29: list every object under the glob's literal
           prefix, then match the names with the glob's regex (`gcs._list` without a glob)
  server   `gcs.list_objects`: GCS is sent the glob as `matchGlob` and lists the matches
           only; the names are matched here too (a guard that costs one regex per match)

Both make the same `GcsObject`s from the same client. The emulator answers a listing in one
page; GCS pages every 1,000 objects, so against GCS the listing of a selective glob saves a
round trip per 1,000 objects listed in vain as well, which this does not measure.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests import gcs_emulator  # noqa: E402 - the tests' launcher and its workarounds

# The emulator rewrites its whole metadata (JSON of every object) on every upload: 10,000
# uploads took over 10 minutes. In memory that file is never read again, so it is not written.
_NO_METADATA_FILE = (
    "from gcp_storage_emulator.storage import Storage\n"
    "Storage._write_config_to_file = lambda self: None\n"
)

_BUCKET = "tpufeed-glob-bench"
GLOBS = [
    "many/part-0000?.bin",  # selective in its literal prefix: listed by prefix either way
    "many/*-04242.bin",  # selective after a wildcard: one match
    "many/part-*7.bin",  # a tenth
    "many/**7.bin",  # a tenth, across folders
    "many/part-*.bin",  # every object: GCS matches, and nothing is saved
]


def listed_here(url: str) -> list:
    """Today's listing before issue 29: everything under the prefix, matched here."""
    from tpufeed.storage.stores import gcs

    bucket, name = gcs.split_url(url)
    prefix = re.split(r"[*?\[]", name, maxsplit=1)[0]
    matcher = re.compile(gcs._glob_regex(name))
    recursive = "/" in name[len(prefix) :] or "**" in name
    listed = gcs._list(bucket, prefix, recursive, 60.0)
    return sorted((o for o in listed if matcher.fullmatch(o.name)), key=lambda o: o.name)


def listed_by_server(url: str) -> list:
    from tpufeed.storage.stores import gcs

    return gcs.list_objects(url)


def upload(emulator: gcs_emulator.Emulator, count: int) -> None:
    client = emulator.client()
    bucket = client.create_bucket(_BUCKET)

    def put(i: int) -> None:
        bucket.blob(f"many/part-{i:05d}.bin").upload_from_string(i.to_bytes(4, "little"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    gcs_emulator._LAUNCH = _NO_METADATA_FILE + gcs_emulator._LAUNCH
    emulator = gcs_emulator.Emulator()
    try:
        started = time.perf_counter()
        upload(emulator, args.objects)
        print(f"uploaded {args.objects} objects in {time.perf_counter() - started:.1f} s")
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
        ways = {"here": listed_here, "server": listed_by_server}
        print(f"{args.rounds} rounds; median seconds per listing")
        print("| glob | matches | here | server | here / server |")
        print("|---|---|---|---|---|")
        for glob in GLOBS:
            url = f"gs://{_BUCKET}/{glob}"
            found = {way: [o.name for o in fn(url)] for way, fn in ways.items()}  # and warm up
            if found["here"] != found["server"]:
                raise SystemExit(f"{glob}: the two ways list different objects")
            times: dict[str, list[float]] = {way: [] for way in ways}
            for r in range(args.rounds):
                order = list(ways.items())
                for way, fn in order if r % 2 else order[::-1]:
                    started = time.perf_counter()
                    fn(url)
                    times[way].append(time.perf_counter() - started)
            here, server = statistics.median(times["here"]), statistics.median(times["server"])
            print(
                f"| `{glob}` | {len(found['here'])} | {here:.4f} | {server:.4f} | "
                f"{here / server:.2f} |"
            )
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
