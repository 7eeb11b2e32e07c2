"""One state structure for the whole life of an iterator (DESIGN.md semantics 4): the same keys
and value types from the first `get_state()` on, for every stage and combination
(tests/semantics/every_stage.py), checked the way checkpoint libraries see a state:

- Grain's own `assert_equal_output_after_checkpoint`, which compares the spec of every state
  with the first's and restores each into a fresh iterator;
- a `jax.tree_util` structure, the same at every step;
- Orbax's PyTree checkpointing, restoring a later state into the template of the first.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.semantics.every_stage import PIPELINES

grain_testing = pytest.importorskip("grain._src.python.testing.experimental")


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_grains_own_checkpoint_check_passes_on_every_stage(name, workers):
    ds = PIPELINES[name]().workers(workers, isolate=bool(workers))
    grain_testing.assert_equal_output_after_checkpoint(ds)


def states_at_every_step(ds):
    with ds.iterator() as it:
        states = [it.get_state()]
        for _ in it:
            states.append(it.get_state())
    return states


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_state_has_the_first_states_tree_structure_and_leaf_types(name):
    jax = pytest.importorskip("jax")
    states = states_at_every_step(PIPELINES[name]())
    first = jax.tree_util.tree_structure(states[0])
    types = [type(leaf) for leaf in jax.tree_util.tree_leaves(states[0])]
    for step, state in enumerate(states):
        assert jax.tree_util.tree_structure(state) == first, f"step {step}"
        assert [type(leaf) for leaf in jax.tree_util.tree_leaves(state)] == types, f"step {step}"
        assert json.loads(json.dumps(state)) == state  # JSON-able, unchanged by the trip


@pytest.mark.parametrize("name", ["flat_map", "pack-batch", "mix-pack-batch", "everything"])
def test_orbax_restores_a_later_state_into_the_first_states_template(name, tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    ds = PIPELINES[name]()
    states = states_at_every_step(ds)
    # The state with the most held (pack rows, outputs of a record half delivered).
    step, later = max(enumerate(states[:-1]), key=lambda s: len(json.dumps(s[1])))
    checkpointer = ocp.PyTreeCheckpointer()
    checkpointer.save(tmp_path / "data", later)
    restored = checkpointer.restore(tmp_path / "data", item=states[0])
    assert restored == later
    expected = list(ds)[step:]
    with ds.iterator(restored) as it:
        got = list(it)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_equal(a, b)
