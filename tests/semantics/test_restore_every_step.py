"""Every stage and combination restores exactly at every step (DESIGN.md semantics 4): a state
taken before each item, restored into a fresh iterator, gives the rest of a straight run, in
this process and with 2 isolated workers (every chunk runs in a worker, none in this process
while they start). The check is Grain's, in tests/semantics/restore.py; the pipelines are in
tests/semantics/every_stage.py."""

import pytest

from tests.semantics.every_stage import PIPELINES
from tests.semantics.restore import assert_equal_output_after_checkpoint, plain


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_stage_restores_at_every_step(name, workers):
    ds = PIPELINES[name]()
    items = assert_equal_output_after_checkpoint(ds.workers(workers, isolate=bool(workers)))
    assert 5 <= len(items) <= 30, len(items)
    if workers:
        assert items == [plain(item) for item in ds]  # what this process makes
