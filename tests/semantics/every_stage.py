"""A pipeline for every stage and combination of stages, on small sources, for checks that run
over all of them (tests/semantics/test_restore_every_step.py).

Workers import the module of a function they run (`noise`, `fails_on_sevens`, ...): this one
imports no pytest, so that each worker starts in milliseconds rather than a second.
"""

import tempfile

import numpy as np

import tpufeed


def records(n=20):
    """Records that say where they come from."""
    return tpufeed.Dataset.from_sequence(
        [{"id": np.int64(i), "x": np.arange(3, dtype=np.int32) + 10 * i} for i in range(n)]
    )


def sequences(n=20):
    """Records whose tokens vary in length (1 to 5) and say where they come from."""
    return tpufeed.Dataset.from_sequence(
        [
            {"id": np.int64(i), "tokens": np.arange(1 + i % 5, dtype=np.int32) + 100 * i}
            for i in range(n)
        ]
    )


def noise(e, rng):
    return {**e, "noise": rng.integers(0, 2**62)}


def fails_on_sevens(e):
    if e["id"] % 7 == 3:
        raise ValueError(f"bad record {int(e['id'])}")
    return e


def tokens_only(e):
    return {"tokens": e["tokens"]}


def indexed(index, e):
    return {**e, "index": np.int64(index)}


def mixture(n_a=9, n_b=13):
    a = records(n_a).shuffle(1)
    b = records(n_b).map(lambda e: {**e, "id": e["id"] + 1000}).filter(lambda e: e["id"] % 3)
    return tpufeed.Dataset.mix([a, b], weights=[2, 1], seed=4, on_end="stop")


# Each pipeline makes 5 to 30 items, across at least one epoch boundary where it can repeat
# (a mixture cannot: "stop" ends it).
PIPELINES = {
    "shuffle": lambda: records(12).shuffle(3).repeat(2),
    "map": lambda: records(12).map(lambda e: {**e, "double": e["id"] * 2}).repeat(2),
    "random_map": lambda: records(12).shuffle(2).random_map(noise).repeat(2),
    "filter": lambda: records(18).shuffle(5).filter(lambda e: e["id"] % 3 != 1).repeat(2),
    "flat_map": lambda: records(12).flat_map(lambda e: [e] * int(e["id"] % 3)).repeat(2),
    "batch": lambda: records().shuffle(1).batch(3).repeat(2),
    "batch-drop_remainder": lambda: records().shuffle(1).batch(3, drop_remainder=True).repeat(2),
    "batch-pad": lambda: sequences().shuffle(1).batch(3, pad={"tokens": [2, 4, 8]}).repeat(2),
    "pack-batch": lambda: (
        sequences(24).map(tokens_only).pack({"tokens": 8}, open_rows=3).batch(2).repeat(2)
    ),
    "pack-best_fit-batch": lambda: (
        sequences(24)
        .shuffle(5)
        .map(tokens_only)
        .pack({"tokens": 8}, open_rows=3, method="best_fit")
        .batch(2)
        .repeat(2)
    ),
    "mix": lambda: mixture(),
    "mix-batch": lambda: mixture().batch(3),
    "mix-pack-batch": lambda: (
        tpufeed.Dataset.mix(
            [sequences(30).map(tokens_only), sequences(25).shuffle(2).map(tokens_only)],
            seed=1,
            on_end="stop",
        )
        .pack({"tokens": 8}, open_rows=2)
        .batch(2)
    ),
    "mix-pack-best_fit-batch": lambda: (
        tpufeed.Dataset.mix(
            [sequences(30).shuffle(3).map(tokens_only), sequences(25).map(tokens_only)],
            weights=[2, 1],
            seed=2,
            on_end="stop",
        )
        .pack({"tokens": 8}, open_rows=3, method="best_fit")
        .batch(2)
    ),
    "repeat-across-epochs": lambda: records(7).shuffle(6).batch(3).repeat(3),
    "slice-records": lambda: records(30).slice(slice(3, 25, 2)).shuffle(4).batch(3).repeat(2),
    "take-shuffled": lambda: records(30).shuffle(8).take(9).filter(lambda e: e["id"] % 4).repeat(2),
    "skip-pack": lambda: (
        sequences(30).skip(12).map(tokens_only).pack({"tokens": 8}, open_rows=2).batch(2).repeat(2)
    ),
    "map_with_index": lambda: (
        records(14).skip(2).map_with_index(indexed).shuffle(3).batch(3).repeat(2)
    ),
    "ignore_errors": lambda: records().map(fails_on_sevens).ignore_errors(10).batch(3).repeat(2),
    "cache": lambda: (
        records(12)
        .shuffle(2)
        .flat_map(lambda e: [e] * int(e["id"] % 3))
        .cache(tempfile.mkdtemp(prefix="tpufeed-every-stage-"), max_bytes=1 << 20)
        .random_map(noise)
        .batch(3)
        .repeat(2)
    ),
    "everything": lambda: (
        records(16)
        .shuffle(9)
        .map(lambda e: {**e, "id": e["id"] + 1})
        .random_map(noise)
        .filter(lambda e: e["id"] % 4 != 0)
        .flat_map(lambda e: [e] * (1 + int(e["id"] % 2)))
        .batch(4)
        .repeat(2)
    ),
}
