"""torchdata's own StatefulDataLoader test patterns (pytorch/data test/stateful_dataloader/
test_state_dict.py), run over `to_torch()`, whose passes are the pipeline's next epochs:

- `_run_and_checkpoint`: stop after k batches, `state_dict()`, the rest of the pass; a new
  loader over the same IterableDataset loaded with that state gives exactly that rest
  (0 and 2 workers, persistent or not, snapshots every 1 or 3 steps);
- the same across epoch boundaries: stopped in pass 1 of 3, a new pipeline and loader in its
  place finish pass 1 and run pass 2, as the uninterrupted loader did;
- `TestSnapshotZero`: a state taken before the first batch restores the whole pass;
- `TestSnapshotEnd`: a state taken after a pass ended restores to the pass after it;
- `TestJsonSerDe`: every state goes through JSON.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import tpufeed

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

N, BATCH = 30, 4  # 8 batches an epoch, the last short


def make(keep_all=True):
    ds = tpufeed.Dataset.from_sequence(list(range(N))).shuffle(9)
    ds = ds.map(lambda r: {"id": np.int64(r)})
    return (ds if keep_all else ds.filter(lambda e: e["id"] % 4 != 1)).batch(BATCH)


def ids(batches):
    return [b["id"].tolist() for b in batches]


def loader(data, workers, persistent=False, every=1):
    return StatefulDataLoader(
        data,
        batch_size=None,
        num_workers=workers,
        persistent_workers=persistent and workers > 0,
        snapshot_every_n_steps=every,
    )


def through_json(state):
    return json.loads(json.dumps(state))


SETTINGS = [  # (workers, persistent, every)
    (0, False, 1),
    pytest.param(2, False, 1, marks=pytest.mark.multiprocess),
    pytest.param(2, True, 1, marks=pytest.mark.multiprocess),
    pytest.param(2, True, 3, marks=pytest.mark.multiprocess),
]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,persistent,every", SETTINGS)
@pytest.mark.parametrize("interrupt", [0, 1, 5])
def test_run_and_checkpoint(workers, persistent, every, interrupt):
    data = make().to_torch()
    first = loader(data, workers, persistent, every)
    it = iter(first)
    for _ in range(interrupt):
        next(it)
    state = through_json(first.state_dict())
    expected = ids(it)
    second = loader(data, workers, persistent, every)
    second.load_state_dict(state)
    assert ids(second) == expected and len(expected) == 8 - interrupt


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,persistent,every", SETTINGS)
@pytest.mark.parametrize("keep_all", [True, False])
def test_a_checkpoint_in_a_later_pass_resumes_it_and_the_passes_after_it(
    workers, persistent, every, keep_all
):
    """As a job restarted from its checkpoint: a new pipeline, a new loader, the state."""
    uninterrupted = loader(make(keep_all).to_torch(), workers, persistent, every)
    expected = [ids(uninterrupted) for _ in range(3)]
    assert expected[0] != expected[1] != expected[2]
    first = loader(make(keep_all).to_torch(), workers, persistent, every)
    got = [ids(first)]
    it = iter(first)
    head = ids(itertools.islice(it, 4))
    state = through_json(first.state_dict())
    del it, first
    second = loader(make(keep_all).to_torch(), workers, persistent, every)
    second.load_state_dict(state)
    got += [head + ids(second), ids(second)]
    assert got == expected


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,persistent,every", SETTINGS)
def test_snapshot_zero_restores_the_whole_pass(workers, persistent, every):
    dl = loader(make().to_torch(), workers, persistent, every)
    it = iter(dl)
    state0 = through_json(dl.state_dict())
    expected = ids(it)
    dl.load_state_dict(state0)
    assert ids(dl) == expected


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,persistent,every", SETTINGS)
def test_snapshot_end_restores_to_the_pass_after_it(workers, persistent, every):
    """torchdata's TestSnapshotEnd.test_iterable: state after a whole pass, then the next pass
    of the same loader; a new loader (that has run 2 batches) restored there gives that pass."""
    dl = loader(make().to_torch(), workers, persistent, every)
    first = ids(dl)
    state_end = through_json(dl.state_dict())
    expected = ids(dl)
    assert expected != first  # the next epoch, in a fresh order
    dl = loader(make().to_torch(), workers, persistent, every)
    it = iter(dl)
    for _ in range(2):
        next(it)
    dl.load_state_dict(state_end)
    assert ids(dl) == expected
