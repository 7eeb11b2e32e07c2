"""TFDS's split strings against TFDS's own arithmetic (`splits._make_file_instructions`): the
same shards, skips and takes for every spelling, percent rounding included; refused where TFDS
refuses or selects nothing."""

import pytest

from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.tfds.splits import shard_spans

tfds = pytest.importorskip("tensorflow_datasets")
from etils import epath  # noqa: E402 - tensorflow_datasets' own dependency
from tensorflow_datasets.core import naming, splits  # noqa: E402

LENGTHS = {"train": [5, 0, 7, 9, 1], "test": [3], "validation": [33, 34, 34], "odd": [7]}

SPECS = [
    "train",
    "train[:50%]",
    "train[10:20]",
    "train[:10%]+test",
    "train[-5:]",
    "train[:-5]",
    "train[-11:-2]",
    "train[33%:67%]",
    "train[-33%:]",
    "train[1.5%:98.5%]",
    "train[12.5%:87.5%]",
    "validation[50%:]",
    "validation[:0.5%]",
    "validation[10.5%:11.5%]",
    "odd[50%:]",
    "odd[:50%]",
    "odd[:21.4286%]",
    "train[2shard]",
    "train[:2shard]",
    "train[-1shard:]",
    "train[1shard:-1shard]",
    "validation[-2shard]",
    "all",
    "test + validation[1:3]",
    "train[25%:]+train[:25%]",
    "train[1_0:2_0]",
    "validation[3:4]+validation[3:4]",
]

REFUSED = [
    "train[9:3]",
    "train[5:5]",
    "train[0:0%]",
    "train[1shard]",  # an empty shard
    "nope",
    "train[30:]",
    "train[-30:]",
    "train[101%:]",
    "train[5]",
    "train[5%]",
    "train[1:2:3]",
    "train[:]",
    "all[:50%]",
    "train[a:b]",
    "train]",
    "",
]


def tfds_instructions(spec):
    infos = [
        splits.SplitInfo(
            name=name,
            shard_lengths=lengths,
            num_bytes=0,
            filename_template=naming.ShardedFileTemplate(
                data_dir=epath.Path("/d"), dataset_name="d", split=name, filetype_suffix="x"
            ),
        )
        for name, lengths in LENGTHS.items()
    ]
    return [
        (f.filename, f.skip, f.take if f.take != -1 else f.examples_in_shard - f.skip)
        for f in splits._make_file_instructions(infos, spec)
    ]


def filename(split, shard):
    count = len(LENGTHS[split])
    return f"/d/d-{split}.x-{shard:05d}-of-{count:05d}"


@pytest.mark.parametrize("spec", SPECS)
def test_each_shard_skip_and_take_is_tfds(spec):
    ours = [(filename(s.split, s.shard), s.skip, s.take) for s in shard_spans(spec, LENGTHS)]
    assert ours == tfds_instructions(spec)


@pytest.mark.parametrize("count", [1, 3, 7, 9, 33, 99, 100, 101, 1001])
@pytest.mark.parametrize("percent", [0.5, 1, 10, 12.5, 33, 33.3, 50, 66.6, 99.5])
def test_percents_round_as_tfds_rounds(count, percent):
    LENGTHS["sized"] = [count]
    try:
        for spec in (f"sized[:{percent}%]", f"sized[{percent}%:]", f"sized[-{percent}%:]"):
            try:
                expected = tfds_instructions(spec)
            except ValueError:
                expected = []
            if not expected:
                with pytest.raises(InvalidArgumentError):
                    shard_spans(spec, LENGTHS)
                continue
            got = [(filename(s.split, s.shard), s.skip, s.take) for s in shard_spans(spec, LENGTHS)]
            assert got == expected, spec
    finally:
        del LENGTHS["sized"]


@pytest.mark.parametrize("spec", REFUSED)
def test_what_tfds_refuses_or_finds_empty_is_refused_by_name(spec):
    try:
        assert tfds_instructions(spec) == []
    except (ValueError, NotImplementedError, AssertionError, KeyError):
        pass
    with pytest.raises(InvalidArgumentError, match="split"):
        shard_spans(spec, LENGTHS)


def test_a_split_that_is_not_a_string_is_refused():
    with pytest.raises(InvalidArgumentError, match="split must be a string"):
        shard_spans(["train"], LENGTHS)
