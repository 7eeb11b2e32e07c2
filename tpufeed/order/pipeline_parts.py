"""What a state records of each part of its pipeline, so that a state refused by another
pipeline is refused naming what differs: the source, the order (shuffle seed, window, slices)
or a stage.

A state's `parts` is one short hash each, joined by dots: the source's, the order's, then each
stage's (`Stage.describe()`, as the fingerprint takes it). It only names differences; the
fingerprint alone decides whether a state belongs to a pipeline.

>>> differing_parts(parts_text(["a", 1, ["map"]]), parts_text(["a", 2, ["map"]]), ["map(f)"])
['the order (shuffle seed, window or slice)']
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["PARTS_KEY", "differing_parts", "parts_text"]

PARTS_KEY = "parts"
_DIGITS = 6  # enough to tell a changed part; a state stays small


def _short(description: Any) -> str:
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGITS]


def parts_text(described: Sequence[Any]) -> str:
    """`described`: [the source's description, the order's, [each stage's]] as its hashes."""
    source, order, stages = described
    return ".".join(_short(part) for part in (source, order, *stages))


def differing_parts(saved: Any, expected: str, stage_names: Sequence[str]) -> list[str]:
    """What differs between the pipeline a state's `saved` parts describe and this one's
    (`expected`, its stages called `stage_names`), in words; [] where the state does not say
    (an older state, or a damaged record)."""
    if not isinstance(saved, str) or not expected:
        return []
    theirs, ours = saved.split("."), expected.split(".")
    if len(theirs) < 2 or not all(len(p) == _DIGITS for p in theirs):
        return []
    said = []
    if theirs[0] != ours[0]:
        said.append("the source (its files, their order or contents, or the data given)")
    if theirs[1] != ours[1]:
        said.append("the order (shuffle seed, window or slice)")
    their_stages, our_stages = theirs[2:], ours[2:]
    if len(their_stages) != len(our_stages):
        listed = ", ".join(stage_names) or "none"
        said.append(
            f"the stages: the state's pipeline has {len(their_stages)}, this one "
            f"{len(our_stages)} ({listed})"
        )
    else:
        said += [
            f"stage {i + 1} ({name} here: the state's is another stage, or takes other "
            "arguments, such as a batch size)"
            for i, (a, b, name) in enumerate(zip(their_stages, our_stages, stage_names))
            if a != b
        ]
    return said
