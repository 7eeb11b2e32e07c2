"""Dataset.expected_fill and pack()'s warning over a built dataset of W3's documents (the
standard library's top-level blocks, byte-tokenized as benchmarks/lm.py does): the expected
fill is within 1% of the fill pack then reaches; a poor row length is warned about."""

from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import tpufeed
from benchmarks.lm import documents, tokenize
from tests.dataset_folder import make_dataset
from tpufeed.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def w3(tmp_path_factory):
    """W3's documents as {"tokens": int32 tokens}, built by WriteShards into 4 shards."""
    import apache_beam as beam

    from tpufeed.beam import WriteShards, in_process_runner

    root = tmp_path_factory.mktemp("w3") / "ds"
    with beam.Pipeline(runner=in_process_runner()) as p:
        _ = p | beam.Create([tokenize(d) for d in documents()]) | WriteShards(str(root), 4)
    return root


def _measured(ds: tpufeed.Dataset, length: int) -> float:
    rows = tokens = 0
    for row in ds:
        rows += 1
        tokens += int((row["tokens_segment_ids"] > 0).sum())
    return tokens / (rows * length)


@pytest.mark.slow
@pytest.mark.parametrize(
    "length, open_rows, method",
    [(1024, 16, "first_fit"), (1024, 16, "best_fit"), (1024, 1, "first_fit"), (512, 4, "best_fit")],
)
def test_the_expected_fill_is_within_a_percent_of_the_fill_measured(w3, length, open_rows, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 512: most documents are longer (the next test)
        packed = (
            tpufeed.Dataset.open(w3)
            .shuffle(seed=5)
            .pack({"tokens": length}, open_rows=open_rows, method=method)
        )
    fit = packed.expected_fill()
    assert (fit.key, fit.length, fit.open_rows, fit.method) == ("tokens", length, open_rows, method)
    assert abs(fit.fill - _measured(packed, length)) < 0.01
    lengths = np.array([len(d) + 1 for d in documents()])  # tokenize adds an end token
    assert abs(fit.longer - np.mean(lengths > length)) < 0.02


@pytest.mark.slow
def test_pack_logs_its_expected_fill_and_warns_of_rows_most_documents_outgrow(w3, caplog):
    ds = tpufeed.Dataset.open(w3)
    with caplog.at_level(logging.INFO, logger="tpufeed"), warnings.catch_warnings():
        warnings.simplefilter("error")  # a good fit warns of nothing
        ds.pack({"tokens": 1024})
    assert "pack({'tokens': 1024}, open_rows=16, method='first_fit'): expected fill 99." in (
        caplog.text
    )
    with pytest.warns(UserWarning, match=r"sequences are longer than a row of 128 \(split"):
        ds.pack({"tokens": 128})


def test_expected_fill_says_why_it_cannot_be_known(tmp_path):
    records = [{"tokens": np.arange(n % 30 + 1)} for n in range(40)]
    make_dataset(tmp_path, [records])
    built = tpufeed.Dataset.open(tmp_path)
    assert built.pack({"tokens": 16}).expected_fill().fill > 0.5
    cases = {
        "no pack stage": built,
        "comes before pack: the build's lengths": built.map(lambda r: r).pack({"tokens": 16}),
        "recorded no lengths of 'other'": built.pack({"other": 16}),
        "packs several keys": built.pack({"tokens": 16, "other": 16}),
        "not a dataset of Dataset.open": tpufeed.Dataset.from_sequence(records).pack(
            {"tokens": 16}
        ),
        "a mixture's fill": tpufeed.Dataset.mix([built, built]).pack({"tokens": 16}),
    }
    for why, ds in cases.items():
        with pytest.raises(InvalidArgumentError, match=why):
            ds.expected_fill()


def test_a_dataset_built_before_statistics_has_no_expected_fill_and_no_warning(tmp_path):
    manifest = make_dataset(tmp_path, [[{"tokens": np.arange(5)}] * 3])
    del manifest["statistics"]["version"]  # as tpufeed 0.2 wrote them
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    ds = tpufeed.Dataset.open(tmp_path)
    assert not ds.statistics.recorded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packed = ds.pack({"tokens": 2})
    with pytest.raises(InvalidArgumentError, match="built before tpufeed recorded statistics"):
        packed.expected_fill()
    assert len(list(packed)) == 8
