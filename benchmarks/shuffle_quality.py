"""How well the global and the windowed shuffles mix: `python benchmarks/shuffle_quality.py`.

Two figures per order, both 1.0 for a uniformly random permutation:
- displacement: mean |epoch position - stored position| over its expectation n/3;
- neighbour spread: mean |record gap| between consecutive positions over its expectation n/3
  (a sequential read scores ~0; a windowed shuffle scores about the window's share of n).
"""

from __future__ import annotations

import argparse

import numpy as np

from tpufeed.order.permutation import Shuffle, permute, windowed_permute


def figures(order: np.ndarray) -> tuple[float, float]:
    n = len(order)
    positions = np.arange(n)
    displacement = np.abs(order - positions).mean() / (n / 3)
    spread = np.abs(np.diff(order)).mean() / (n / 3)
    return float(displacement), float(spread)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=64)
    args = parser.parse_args()
    n, shards = args.records, args.shards
    starts = tuple(int(s) for s in np.linspace(0, n, shards + 1).round())
    rows = [("global", permute(np.arange(n), n, seed=0, epoch=0))]
    for window in (1, 4, 16, shards):
        rows.append(
            (
                f"windowed, {window} of {shards} shards",
                windowed_permute(np.arange(n), Shuffle(0, window, starts), epoch=0),
            )
        )
    rows.append(("no shuffle", np.arange(n)))
    print(f"{n:,} records in {shards} shards")
    print(f"{'order':<32} {'displacement':>13} {'neighbour spread':>17}")
    for name, order in rows:
        d, s = figures(order)
        print(f"{name:<32} {d:>13.3f} {s:>17.3f}")


if __name__ == "__main__":
    main()
