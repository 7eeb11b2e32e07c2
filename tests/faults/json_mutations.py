"""Hypothesis strategies that damage JSON documents (manifests, iterator states) one place at a
time: a value replaced by any JSON value, a key deleted, a key added, a list shortened."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def places(doc: Any, where: tuple = ()) -> list[tuple]:
    """Every path (keys and list indices) into `doc`, the root included."""
    found = [where]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += places(value, (*where, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += places(value, (*where, i))
    return found


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """A copy of `doc` damaged at one place: near the original ints most of the time, since
    off-by-one counts are the likeliest damage, and any JSON value otherwise."""
    doc = copy.deepcopy(doc)
    where = draw(st.sampled_from(places(doc)[1:]))
    parent = doc
    for step in where[:-1]:
        parent = parent[step]
    last = where[-1]
    action = draw(st.sampled_from(["replace", "nudge", "delete", "add"]))
    if action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.text(max_size=8))] = draw(JSON_VALUES)
    elif action == "nudge" and isinstance(parent[last], int) and not isinstance(parent[last], bool):
        parent[last] += draw(st.sampled_from([-2, -1, 1, 2, 1000]))
    else:
        parent[last] = draw(JSON_VALUES)
    return doc
