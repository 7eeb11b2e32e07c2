"""A state refused by another pipeline names what differs (issue 47: StateError did not say
which part of the pipeline differed, and a malformed state got a foreign one's message)."""

from __future__ import annotations

import pytest

import tpufeed
from tpufeed.errors import StateError
from tpufeed.order.pipeline_parts import differing_parts, parts_text


def keep(x):
    return x


def base(n=20):
    return tpufeed.Dataset.from_sequence(list(range(n)))


@pytest.fixture(scope="module")
def state():
    it = base().shuffle(1).map(keep).batch(4).iterator()
    next(it)
    return it.get_state()


@pytest.mark.parametrize(
    "other, says",
    [
        (base(21).shuffle(1).map(keep).batch(4), "it differs from this one in the source ("),
        (base().shuffle(2).map(keep).batch(4), "it differs from this one in the order (shuffle"),
        (base().shuffle(1).filter(keep).batch(4), "in stage 1 (filter(keep) here: the state's"),
        (base().shuffle(1).map(keep).batch(5), "in stage 2 (batch here: the state's is another"),
        (
            base().shuffle(1).map(keep).batch(4).map(keep),
            "in the stages: the state's pipeline has 2, this one 3 (map(keep), batch, map(keep))",
        ),
    ],
)
def test_another_pipeline_is_refused_naming_what_differs(state, other, says):
    with pytest.raises(StateError, match="belongs to another dataset or pipeline") as refused:
        other.iterator(state)
    assert says in str(refused.value)


def test_two_differences_are_both_named(state):
    with pytest.raises(StateError) as refused:
        base().shuffle(2).filter(keep).batch(4).iterator(state)
    assert "in the order (shuffle seed, window or slice), and in stage 1 (filter" in str(
        refused.value
    )


def test_a_state_without_its_parts_is_refused_as_before(state):
    older = {k: v for k, v in state.items() if k != "parts"}
    with pytest.raises(StateError, match="the source, shuffle seed, transforms and batching"):
        base().shuffle(2).map(keep).batch(4).iterator(older)
    assert base().shuffle(1).map(keep).batch(4).iterator(older) is not None  # its own: resumes


@pytest.mark.parametrize("parts", [None, 7, "", "xyz", "a.b.c", "0" * 40])
def test_damaged_parts_are_never_trusted_to_name_a_part(state, parts):
    with pytest.raises(StateError, match="the source, shuffle seed, transforms and batching"):
        base().shuffle(2).map(keep).batch(4).iterator({**state, "parts": parts})


@pytest.mark.parametrize(
    "given, says",
    [
        (
            {"epoch": 1, "consumed": 3},
            "not one tpufeed wrote (no 'version' or 'fingerprint'; its keys: 'epoch', 'consumed')",
        ),
        ({}, "its keys: none"),
        (
            {"version": 3, "fingerprint": None},
            "field 'fingerprint' must be the text get_state() wrote",
        ),
        ({"version": 99, "fingerprint": "x"}, "has version 99; this tpufeed reads versions"),
    ],
)
def test_a_malformed_state_is_told_apart_from_a_foreign_one(given, says):
    with pytest.raises(StateError) as refused:
        base().batch(4).iterator(given)
    assert says in str(refused.value) and "belongs to another" not in str(refused.value)


def test_parts_compare_by_position_and_stay_small():
    a = parts_text(["src", {"seed": 1}, ["map", "batch"]])
    assert len(a) == 4 * 7 - 1  # four 6-digit hashes
    assert differing_parts(a, a, ["map(f)", "batch"]) == []
    b = parts_text(["src", {"seed": 1}, ["map", {"batch": 5}]])
    assert differing_parts(a, b, ["map(f)", "batch"]) == [
        "stage 2 (batch here: the state's is another stage, or takes other arguments, such as "
        "a batch size)"
    ]
