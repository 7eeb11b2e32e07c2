"""PyTorch's plain per-epoch loop over `to_torch()`: each pass is the pipeline's next epochs.

`for epoch in range(E): for batch in DataLoader(ds.to_torch(), ...)` (one loader or a new one
each epoch, persistent workers or not, torchdata's StatefulDataLoader) gives epoch 0, 1, ...
of the pipeline, a fresh order each, with 0 and 2 workers; `repeat(n)` makes each pass n
epochs; a pass left early does not shift the next; `set_epoch(e)` picks the pass everywhere;
an endless pipeline's passes start at successive epochs; a mixture's repeat with a warning.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torch.utils.data import DataLoader  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

N, BATCH, E = 30, 4, 3  # 8 batches an epoch (the last short), 3 epochs


def to_element(r):
    return {"id": np.int64(r)}


def make(epochs=1, keep=None):
    ds = tpufeed.Dataset.from_sequence(list(range(N))).shuffle(5).map(to_element)
    ds = ds.filter(lambda e: e["id"] % 3 != keep) if keep is not None else ds
    return ds.batch(BATCH).repeat(epochs)


def ids(batches):
    return [b["id"].tolist() for b in batches]


def epochs_of(ds):
    """The pipeline's batches grouped by the epoch each came from."""
    grouped: dict[int, list] = {}
    with ds.iterator() as it:
        for batch in it:
            grouped.setdefault(it.get_state()["epoch"], []).append(batch["id"].tolist())
    return [grouped[e] for e in sorted(grouped)]


def loader(data, workers, kind="dataloader"):
    persistent = kind == "persistent"
    cls = StatefulDataLoader if kind == "stateful" else DataLoader
    return cls(data, batch_size=None, num_workers=workers, persistent_workers=persistent)


LOOPS = [
    (0, "dataloader"),
    (0, "stateful"),
    pytest.param(2, "dataloader", marks=pytest.mark.multiprocess),
    pytest.param(2, "persistent", marks=pytest.mark.multiprocess),
    pytest.param(2, "stateful", marks=pytest.mark.multiprocess),
]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,kind", LOOPS)
def test_each_pass_over_one_loader_is_the_pipelines_next_epoch(workers, kind):
    epochs = epochs_of(make(epochs=E))
    assert epochs[0] != epochs[1] != epochs[2]  # a fresh order each epoch
    data = make().to_torch()
    one = loader(data, workers, kind)
    passes = [ids(one) for _ in range(E)]
    assert passes == epochs and [len(p) for p in passes] == [len(data)] * E


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,kind", LOOPS)
def test_a_loader_made_anew_each_epoch_goes_on_too(workers, kind):
    """The issue's loop: `DataLoader(ds.to_torch())` inside `for epoch in range(E)`."""
    ds = make()
    passes = [ids(loader(ds.to_torch(), workers, kind)) for _ in range(E)]
    assert passes == epochs_of(make(epochs=E))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_a_pass_of_a_pipeline_that_repeats_n_times_is_its_next_n_epochs(workers):
    epochs = epochs_of(make(epochs=6))
    data = make(epochs=3).to_torch()
    one = loader(data, workers)
    assert len(one) == len(make(epochs=3)) == 3 * len(make())
    first, second = ids(one), ids(one)
    assert first == sum(epochs[:3], []) and second == sum(epochs[3:], [])


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_a_pass_left_early_does_not_shift_the_next(workers):
    """As a sampler draws the next epoch's order whatever the last one delivered."""
    epochs = epochs_of(make(epochs=E))
    one = loader(make().to_torch(), workers)
    for _first in one:
        break  # the rest of epoch 0 is never seen
    head = ids(itertools.islice(one, 3))
    assert head == epochs[1][:3]
    assert ids(one) == epochs[2]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    "workers,kind",
    [(0, "dataloader"), pytest.param(2, "persistent", marks=pytest.mark.multiprocess)],
)
def test_set_epoch_picks_the_next_pass_in_every_worker(workers, kind):
    """As DistributedSampler users call it, before each epoch; persistent workers, started
    before the call, follow it too."""
    epochs = epochs_of(make(epochs=8))
    data = make().to_torch()
    one = loader(data, workers, kind)
    assert ids(one) == epochs[0]
    data.set_epoch(5)
    assert ids(one) == epochs[5] and ids(one) == epochs[6]  # then the passes go on
    for epoch in (0, 0, 7):
        data.set_epoch(epoch)
        assert ids(one) == epochs[epoch]
    for bad in (-1, 1.0, True, "2"):
        with pytest.raises(InvalidArgumentError, match=r"set_epoch takes an int >= 0"):
            data.set_epoch(bad)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_an_endless_pipelines_passes_start_at_successive_epochs(workers):
    epochs = epochs_of(make(epochs=E))
    one = loader(make(epochs=None).to_torch(), workers)
    for epoch in range(E):
        assert ids(itertools.islice(one, 5)) == epochs[epoch][:5]
    with pytest.raises(TypeError, match=r"repeat\(\)"):
        len(one)


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_where_the_data_decides_the_counts_each_pass_is_a_fresh_epoch_too():
    """After a filter each worker batches its own share: other batches than num_workers=0,
    but every kept record once a pass, a new order each pass, the same on every run."""
    kept = sorted(r for r in range(N) if r % 3 != 1)

    def run():
        one = loader(make(keep=1).to_torch(), 2)
        return [ids(one) for _ in range(E)]

    passes = run()
    assert all(sorted(i for b in p for i in b) == kept for p in passes)
    assert passes[0] != passes[1] != passes[2]
    assert run() == passes


def test_a_mixture_has_no_next_epoch_so_a_new_pass_repeats_with_a_warning():
    parts = [
        tpufeed.Dataset.from_sequence([i] * 4).map(lambda i: {"id": np.int64(i)}) for i in (1, 2)
    ]
    one = loader(tpufeed.Dataset.mix(parts, on_end="stop").batch(2).to_torch(), 0)
    first = ids(one)
    with pytest.warns(RuntimeWarning, match="mixture.*repeats its order.*set_state"):
        assert ids(one) == first


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawned_workers_share_the_pass_count(context):
    """The pass book travels to spawned workers as multiprocessing sends descriptors."""
    data = make().to_torch()
    one = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context=context)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        passes = [ids(one) for _ in range(2)]
    data.set_epoch(2)
    passes.append(ids(one))
    assert passes == epochs_of(make(epochs=E))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_tpufeeds_own_state_resumes_mid_pass_and_the_passes_go_on(workers):
    """A state taken in pass 1 (num_workers=0), set on a new pipeline: the rest of pass 1,
    then pass 2, with any num_workers."""
    epochs = epochs_of(make(epochs=E))
    data = make().to_torch()
    assert ids(data) == epochs[0]
    it = iter(data)
    head = ids(itertools.islice(it, 3))
    resumed = make().to_torch()
    resumed.set_state(it.get_state())
    assert resumed.get_state() == it.get_state()  # where its next pass starts
    one = loader(resumed, workers)
    assert head + ids(one) == epochs[1]
    assert ids(one) == epochs[2]


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_loaders_made_anew_with_one_seeded_generator_still_go_on():
    """The same seed each epoch gives every new loader's workers the same base seed."""
    ds = make()
    passes = [
        ids(
            DataLoader(
                ds.to_torch(),
                batch_size=None,
                num_workers=2,
                generator=torch.Generator().manual_seed(0),
            )
        )
        for _ in range(E)
    ]
    assert passes == epochs_of(make(epochs=E))


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_state_set_in_the_loop_reaches_persistent_workers():
    """Workers started before `set_state` continue there at their next pass."""
    epochs = epochs_of(make(epochs=E))
    data = make().to_torch()
    one = loader(data, 2, "persistent")
    assert ids(one) == epochs[0]
    it = iter(make().to_torch())
    head = ids(itertools.islice(it, 3))
    data.set_state(it.get_state())  # 3 batches into epoch 0
    assert head + ids(one) == epochs[0]
    assert ids(one) == epochs[1]
