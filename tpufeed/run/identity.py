"""What identifies a pipeline to its states: the fingerprint a state must match to resume,
and the parts (source, order, each stage) a refused state is compared by, to name what differs.

>>> pipeline_fingerprint(source, seed=0, window=None, stages=())  # doctest: +SKIP
'3f2a9c0d5e7b1a46'
"""

from __future__ import annotations

from typing import Any

from tpufeed.ops.cache import Cache
from tpufeed.ops.registry import Stage
from tpufeed.order.pipeline_parts import parts_text
from tpufeed.order.slicing import WHOLE, Slicing
from tpufeed.order.state import fingerprint as fingerprint_of
from tpufeed.sources.view import SourceView

__all__ = ["pipeline_fingerprint", "pipeline_parts", "stage_names"]


def _described(
    source: SourceView,
    seed: int | None,
    window: int | None,
    stages: tuple[Stage, ...],
    slicing: Slicing,
) -> dict[str, Any]:
    """All a state's pipeline is: a `cache()` changes none of the items, so it is left out
    (states move in and out of it)."""
    described: dict[str, Any] = {
        "source": source.fingerprint(),
        "seed": seed,
        "window": window,
        "ops": [stage.describe() for stage in stages if not isinstance(stage, Cache)],
    }
    cut = slicing.describe()
    if cut is not None:  # pipelines without a slice keep the fingerprints they had
        described["slice"] = cut
    return described


def pipeline_fingerprint(
    source: SourceView,
    seed: int | None,
    window: int | None,
    stages: tuple[Stage, ...],
    slicing: Slicing = WHOLE,
) -> str:
    """Identifies source, shuffle seed, slices and stages; states only restore into a match."""
    return fingerprint_of(_described(source, seed, window, stages, slicing))


def pipeline_parts(
    source: SourceView,
    seed: int | None,
    window: int | None,
    stages: tuple[Stage, ...],
    slicing: Slicing = WHOLE,
) -> str:
    """The state's record of each part (`tpufeed.order.pipeline_parts`)."""
    described = _described(source, seed, window, stages, slicing)
    order = {key: described.get(key) for key in ("seed", "window", "slice")}
    return parts_text([described["source"], order, described["ops"]])


def stage_names(stages: tuple[Stage, ...]) -> tuple[str, ...]:
    """The stages the parts describe, as stats and errors name them (`map(decode)`, `batch`)."""
    return tuple(
        str(getattr(stage, "name", None) or getattr(stage, "kind", type(stage).__name__))
        for stage in stages
        if not isinstance(stage, Cache)
    )
