"""Iterator states saved by each release, and the items each one continues with, for
`test_saved_states.py`: 0.1.0 (commit 65f5c11, before the package was regrouped into layers) and
0.2.0 (tag v0.2.0).

Run with a release to write `data/states-<its version>.json`:

    git worktree add /tmp/release v0.2.0 && cd /tmp/release
    PYTHONPATH=. python <this checkout>/tests/semantics/saved_states.py <this checkout>/tests/semantics/data

Only public names are used, so the same pipelines build on every later release; the test
rebuilds each, restores the saved state and checks that the next items are the recorded ones.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import tpufeed
from tpufeed.sources.array_record import write_array_records

RECORDS = 40


def element(i):
    return {"x": np.arange(i % 5 + 1, dtype=np.int32) + i, "y": np.int64(i)}


def elements():
    return [element(i) for i in range(RECORDS)]


def first_x(e):
    return {"x": e["x"][:1], "y": e["y"]}


def noisy(e, rng):
    return {**e, "x": e["x"] + rng.integers(0, 100, size=e["x"].shape, dtype=np.int32)}


def not_multiple_of_three(e):
    return int(e["y"]) % 3 != 0


def halves(e):
    x = e["x"]
    return [{"x": x[:1], "y": e["y"]}, {"x": x[1:], "y": e["y"]}] if len(x) > 1 else [e]


def tokens(e):
    return {"tokens": e["x"]}


WRITTEN_NS = 1_764_000_000 * 10**9  # the shards' fixed mtime: a state since 0.2.0 records it


def write_shards(folder):
    """Three small ArrayRecord shards of codec records, under fixed names and times (a state
    records each file's name, size and mtime: rewritten files are the same files to it)."""
    paths = []
    for shard in range(3):
        path = os.path.join(folder, f"saved-{shard}.array_record")
        write_array_records(
            path, (tpufeed.codec.encode(element(10 * shard + i)) for i in range(10))
        )
        os.utime(path, ns=(WRITTEN_NS, WRITTEN_NS))
        paths.append(path)
    return paths


def pipelines(folder):
    """name -> (hosts -> a Dataset for host `host` of `hosts`)."""
    seq = tpufeed.Dataset.from_sequence
    files = tpufeed.Dataset.from_array_record

    def plain(host, hosts):
        return seq(elements()).shuffle(seed=3).shard(host, hosts).map(first_x).batch(4).repeat(3)

    def random(host, hosts):
        return (
            seq(elements())
            .shuffle(seed=5)
            .shard(host, hosts)
            .random_map(noisy)
            .map(first_x)
            .batch(3, drop_remainder=True)
            .repeat(2)
        )

    def filtered(host, hosts):
        return (
            seq(elements())
            .shuffle(seed=7)
            .shard(host, hosts)
            .filter(not_multiple_of_three)
            .map(first_x)
            .batch(4)
            .repeat(2)
        )

    def flat(host, hosts):
        return seq(elements()).shuffle(seed=11).shard(host, hosts).flat_map(halves).repeat(2)

    def packed(host, hosts):
        return (
            seq(elements())
            .shuffle(seed=13)
            .shard(host, hosts)
            .map(tokens)
            .pack({"tokens": 8}, open_rows=3)
            .batch(2)
            .repeat(2)
        )

    def mixed(host, hosts):
        a = seq(elements()).shuffle(seed=17).map(first_x)
        b = seq(elements()[:15]).map(first_x)
        return tpufeed.Dataset.mix([a, b], weights=[0.6, 0.4], seed=1).shard(host, hosts).batch(5)

    def windowed(host, hosts):
        return (
            files(os.path.join(folder, "saved-*.array_record"))
            .shuffle(seed=19, window=2)
            .shard(host, hosts)
            .map(tpufeed.codec.decode)
            .map(first_x)
            .batch(4)
            .repeat(2)
        )

    return {
        "plain": plain,
        "random": random,
        "filtered": filtered,
        "flat": flat,
        "packed": packed,
        "mixed": mixed,
        "windowed": windowed,
    }


# (pipeline, hosts that saved, items each host had taken, hosts that resume, items to record);
# a tuple of (hosts, items) pairs instead of one host count: a relay of runs, each resumed from
# all hosts' states of the one before (so the last states hold layers and carries).
CASES = [
    ("plain", 1, 3, 1, 12),
    ("plain", 2, 7, 3, 6),
    ("random", 1, 9, 1, 6),
    ("filtered", 2, 5, 3, 6),
    ("flat", 1, 23, 1, 12),
    ("flat", 2, 11, 1, 12),
    ("packed", 1, 5, 1, 8),
    ("packed", 2, 3, 3, 5),
    ("mixed", 1, 6, 1, 8),
    ("mixed", 2, 2, 1, 8),
    ("windowed", 1, 5, 1, 10),
    ("windowed", 3, 2, 2, 4),
    ("filtered", ((2, 5), (3, 1)), None, 2, 6),
    ("flat", ((2, 7), (3, 3), (2, 1)), None, 1, 10),
]


def plain_values(item):
    """An item as JSON: arrays as [dtype, shape, values]."""
    if isinstance(item, dict):
        return {key: plain_values(value) for key, value in item.items()}
    array = np.asarray(item)
    return [str(array.dtype), list(array.shape), array.ravel().tolist()]


def take(iterator, count):
    out = []
    for _ in range(count):
        try:
            out.append(plain_values(next(iterator)))
        except StopIteration:
            break
    return out


def saved_case(build, hosts, steps, resumed_hosts, count):
    relay = hosts if isinstance(hosts, tuple) else ((hosts, steps),)
    saved = None
    for hosts, steps in relay:
        states = []
        for host in range(hosts):
            it = build(host, hosts).iterator(saved)
            for _ in range(steps):
                next(it)
            states.append(it.get_state())
        saved = states[0] if hosts == 1 else states
    following = [
        take(build(host, resumed_hosts).iterator(saved), count) for host in range(resumed_hosts)
    ]
    return {"saved": saved, "resumed_hosts": resumed_hosts, "count": count, "following": following}


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    write_shards(out_dir)
    built = pipelines(out_dir)
    cases = []
    for name, hosts, steps, resumed_hosts, count in CASES:
        case = saved_case(built[name], hosts, steps, resumed_hosts, count)
        cases.append({"pipeline": name, "hosts": hosts, "steps": steps, **case})
    with open(os.path.join(out_dir, f"states-{tpufeed.__version__}.json"), "w") as f:
        json.dump({"tpufeed": tpufeed.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    for shard in range(3):
        os.remove(os.path.join(out_dir, f"saved-{shard}.array_record"))


if __name__ == "__main__":
    main(sys.argv[1])
