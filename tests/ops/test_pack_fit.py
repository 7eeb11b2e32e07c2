"""pack_fit: the fill pack's packers reach over lengths drawn from a histogram, and its advice."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed
from tpufeed.ops.pack_fit import SAMPLE, _drawn, pack_fit
from tpufeed.sources.built.length_histogram import LengthHistogram


def _rows(lengths) -> list[tuple[int, int, int]]:
    """The histogram's rows, bounded by the least and greatest length (as recorded)."""
    histogram = LengthHistogram()
    histogram.add_many(lengths)
    rows = [tuple(row) for row in histogram.rows()]
    rows[0] = (max(rows[0][0], min(lengths)), *rows[0][1:])
    rows[-1] = (rows[-1][0], min(rows[-1][1], max(lengths)), rows[-1][2])
    return rows


def _measured(lengths, length: int, open_rows: int, method: str, cut: bool = False) -> float:
    """The fill Dataset.pack reaches on sequences of `lengths`, one epoch."""
    records = [{"tokens": np.ones(n, np.int32)} for n in lengths]
    packed = tpufeed.Dataset.from_sequence(records).pack(
        {"tokens": length}, open_rows=open_rows, method=method, cut=cut
    )
    rows = tokens = 0
    for row in packed:
        rows += 1
        tokens += int((row["tokens_segment_ids"] > 0).sum())
    return tokens / (rows * length)


def test_the_drawn_lengths_follow_the_histogram_exactly_where_it_is_exact():
    lengths = [3, 3, 5, 7, 7, 7, 15, 15]  # below 16 every length is its own bucket
    assert sorted(_drawn(_rows(lengths), len(lengths)).tolist()) == sorted(lengths)
    drawn = _drawn(_rows(np.arange(1000, 3000)), 500)
    assert 1000 <= drawn.min() and drawn.max() <= 2999 and abs(drawn.mean() - 1999.5) < 20


@pytest.mark.parametrize("method", ["first_fit", "best_fit"])
@pytest.mark.parametrize("open_rows", [1, 4, 16])
@pytest.mark.parametrize("cut", [False, True])
def test_the_expected_fill_is_within_a_percent_of_pack_s(method, open_rows, cut):
    rng = np.random.default_rng(open_rows)
    lengths = np.minimum(rng.lognormal(5.5, 1.0, 3000).astype(int) + 1, 20_000)
    fit = pack_fit(_rows(lengths), len(lengths), 256, open_rows, method, cut)
    assert abs(fit.fill - _measured(lengths, 256, open_rows, method, cut)) < 0.01
    assert abs(fit.longer - np.mean(lengths > 256)) < 0.02
    if cut:
        dropped = np.maximum(lengths - 256, 0).sum() / lengths.sum()
        assert abs(fit.dropped - dropped) < 0.01


def test_mostly_longer_sequences_are_said_with_a_length_that_holds_them():
    lengths = np.arange(1500, 2500)
    fit = pack_fit(_rows(lengths), len(lengths), 1024, 16, "first_fit")
    assert fit.longer == 1.0 and 2300 <= fit.whole_at <= 2500
    assert "100% of the 'tokens' sequences are longer than a row of 1024" in fit.advice


def test_a_poor_fill_names_a_nearby_length_that_fills_far_better():
    lengths = [600] * 2000  # one sequence a row of 1024: 59% full; 1200 holds two
    fit = pack_fit(_rows(lengths), len(lengths), 1024, 16, "first_fit")
    assert fit.fill < 0.6 and fit.better is not None
    assert fit.better[0] in (512, 768, 1536, 2048) and fit.better[1] > fit.fill + 0.05
    assert f"a row of {fit.better[0]} would fill" in str(fit)


def test_a_good_fit_says_nothing_more_and_a_sample_stands_for_a_large_dataset():
    lengths = np.random.default_rng(0).integers(10, 200, 50_000)
    fit = pack_fit(_rows(lengths), len(lengths), 1024, 16, "best_fit")
    assert len(lengths) > SAMPLE and fit.advice is None and fit.better is None
    assert abs(fit.fill - _measured(lengths, 1024, 16, "best_fit")) < 0.01
    assert str(fit).endswith("expected fill %.1f%%" % (100 * fit.fill))
