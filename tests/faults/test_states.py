"""Property: a damaged iterator state resumes correctly or raises `StateError`; never another
exception. Correctly: the records delivered are the dataset's, none twice in an epoch, and a
damage that leaves the position as it was (an added key, an accepted change of files)
continues exactly as the undamaged state does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tpufeed
from tests.faults.budget import examples
from tests.faults.json_mutations import mutated
from tpufeed.errors import StateError
from tpufeed.sources.array_record import write_array_records

RECORDS = 14
POSITION = (
    *("version", "fingerprint", "epoch", "base", "hosts", "host", "consumed"),
    *("emitted", "layers", "carries"),
)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """(a two-epoch pipeline over two real ArrayRecord files, states at steps 0..3, and what
    each state continues with)."""
    root = tmp_path_factory.mktemp("files")
    paths = [str(root / f"part-{i}.array_record") for i in range(2)]
    for i, path in enumerate(paths):
        write_array_records(path, [b"%03d" % r for r in range(i * 7, i * 7 + 7)])

    def make():
        return tpufeed.Dataset.from_array_record(paths).shuffle(seed=3).batch(3).repeat(2)

    it = make().iterator()
    states = []
    for _ in range(4):
        states.append(json.loads(json.dumps(it.get_state())))
        next(it)
    return make, states, [batches(make().iterator(s)) for s in states]


def batches(items) -> list[list[int]]:
    return [[int(r) for r in np.asarray(item).tolist()] for item in items]


def epochs_are_exactly_once_at_most(delivered: list[list[int]]) -> None:
    flat = [r for batch in delivered for r in batch]
    assert set(flat) <= set(range(RECORDS))
    assert len(flat) <= 2 * RECORDS


@examples(60)  # 60 in the suite, more under tests/fuzz_all.sh
@given(data=st.data())
def test_a_damaged_state_resumes_correctly_or_raises_state_error(pipeline, data):
    make, states, continued = pipeline
    step = data.draw(st.integers(0, len(states) - 1), label="step")
    state = data.draw(mutated(states[step]), label="state")
    try:
        delivered = batches(make().iterator(state))
    except StateError as e:
        assert str(e)
        return
    epochs_are_exactly_once_at_most(delivered)
    if all(state.get(key) == states[step].get(key) for key in POSITION):
        assert delivered == continued[step]


def test_a_cleared_record_of_the_files_resumes_exactly(pipeline):
    make, states, continued = pipeline
    for state, after in zip(states, continued):
        assert batches(make().iterator(tpufeed.accept_changed_shards(state))) == after
