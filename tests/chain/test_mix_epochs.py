"""Dataset.mix(epochs=...): weights stated in epochs of each component, from its record count."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import tpufeed
from tests.dataset_folder import make_dataset
from tpufeed.chain.mix_epochs import epoch_weights
from tpufeed.errors import InvalidArgumentError


def test_one_pass_reads_each_component_its_epochs():
    a = tpufeed.Dataset.from_sequence(["a"] * 6)
    b = tpufeed.Dataset.from_sequence(["b"] * 3)
    mixed = tpufeed.Dataset.mix([a, b.repeat(2)], epochs=[1, 2], on_end="stop")
    assert "".join(mixed) == "ab" * 6  # 6 of a (one epoch), 6 of b (two epochs)


@pytest.mark.parametrize("epochs", [[1, 2], [0.5, 3], [2, 1]])
def test_built_datasets_are_weighed_by_their_manifest_s_counts(tmp_path, epochs):
    make_dataset(tmp_path / "a", [[{"x": np.int64(i), "c": 0} for i in range(40)]])
    make_dataset(tmp_path / "b", [[{"x": np.int64(i), "c": 1} for i in range(10)]])
    a, b = tpufeed.Dataset.open(tmp_path / "a"), tpufeed.Dataset.open(tmp_path / "b")
    assert epoch_weights([a, b], epochs) == [40.0 * epochs[0], 10.0 * epochs[1]]
    it = iter(tpufeed.Dataset.mix([a, b], epochs=epochs))
    total = round(40 * epochs[0] + 10 * epochs[1])
    drawn = Counter(int(next(it)["c"]) for _ in range(total))
    assert abs(drawn[0] - 40 * epochs[0]) <= 1 and abs(drawn[1] - 10 * epochs[1]) <= 1


def test_a_slice_of_a_component_is_what_its_epoch_holds():
    a = tpufeed.Dataset.from_sequence(range(100)).take(30)
    b = tpufeed.Dataset.from_sequence(range(100))
    assert epoch_weights([a, b], [1, 1]) == [30.0, 100.0]


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda a, b: tpufeed.Dataset.mix([a.filter(bool), b], epochs=[1, 1]),
            r"component 0's is not known before reading it \(.*filter.*\); give weights=",
        ),
        (
            lambda a, b: tpufeed.Dataset.mix([a, b], weights=[1, 1], epochs=[1, 1]),
            "weights= or epochs=, not both",
        ),
        (lambda a, b: tpufeed.Dataset.mix([a, b], epochs=[1]), "one epochs count per dataset"),
        (lambda a, b: tpufeed.Dataset.mix([a, b], epochs=[1, 0]), "positive numbers"),
        (lambda a, b: tpufeed.Dataset.mix([a, b], epochs=[1, True]), "positive numbers"),
        (
            lambda a, b: tpufeed.Dataset.mix([a, b.take(0)], epochs=[1, 1]),
            "component 1 has no records",
        ),
    ],
)
def test_what_cannot_be_weighed_in_epochs_is_refused_by_name(make, match):
    a, b = tpufeed.Dataset.from_sequence([1, 2, 3]), tpufeed.Dataset.from_sequence([4, 5])
    with pytest.raises(InvalidArgumentError, match=match):
        make(a, b)
