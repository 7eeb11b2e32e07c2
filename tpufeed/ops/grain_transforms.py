"""Grain's transform objects as stage functions: `map(grain.transforms.Map())` and its kin.

Grain calls each kind of transform by its own method: `Map.map(element)`,
`RandomMap.random_map(element, rng)`, `Filter.filter(element)`,
`MapWithIndex.map_with_index(index, element)` and `FlatMap.flat_map(element)` (a sequence of at
most `max_fan_out` elements: Grain raises past it, and so does this). Each stage takes its own
kind, called as Grain calls it; another kind is refused, naming the stage it belongs to.
Grain is never imported: a transform is known by the classes it derives from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tpufeed.errors import InvalidArgumentError

__all__ = ["FanOutChecked", "GrainCall", "grain_function", "grain_kind"]

# Grain's transform base classes (grain._src.core.transforms), by name: the method each is
# called by, and the tpufeed stage that calls it so.
_KINDS = {
    "Map": ("map", "map"),
    "RandomMap": ("random_map", "random_map"),
    "Filter": ("filter", "filter"),
    "MapWithIndex": ("map_with_index", "map_with_index"),
    "FlatMap": ("flat_map", "flat_map"),
}


def grain_kind(obj: Any) -> str | None:
    """The name of the Grain transform class `obj` derives from (None: not a Grain transform)."""
    return _kind_of(type(obj))


def _kind_of(cls: type) -> str | None:
    for base in cls.__mro__:
        if base.__module__.startswith("grain.") and base.__name__ in _KINDS:
            return base.__name__
    return None


def grain_function(obj: Any, stage: str) -> Callable[..., Any] | None:
    """What `stage` calls for `obj`, a Grain transform object (None: `obj` is not one). Raises
    naming the right stage where `obj` is another kind of transform."""
    if isinstance(obj, type) and _kind_of(obj) is not None:
        raise InvalidArgumentError(
            f"{stage}({obj.__name__}): {obj.__name__} is a Grain transform class; did you mean "
            f"{obj.__name__}()? Its instances are the transforms"
        )
    kind = grain_kind(obj)
    if kind is None:
        return None
    method, belongs = _KINDS[kind]
    if belongs != stage:
        raise InvalidArgumentError(
            f"{stage}({type(obj).__name__}): a Grain {kind} transform is called by its "
            f"{method}() method: pass it to {belongs}() instead"
        )
    if kind == "FlatMap":
        return FanOutChecked(obj)
    return GrainCall(obj, method)


class GrainCall:
    """A Grain transform's method, named by the transform's class (`map(Normalize)` in stage
    names and errors, where a bound method would say `map(map)`)."""

    def __init__(self, transform: Any, method: str):
        self.transform, self.method = transform, method
        self.__name__ = type(transform).__name__
        self.call: Callable[..., Any] = getattr(transform, method)

    def __call__(self, *args: Any) -> Any:
        return self.call(*args)


class FanOutChecked:
    """A Grain `FlatMap`'s `flat_map`, refusing more outputs than its `max_fan_out`, as Grain's
    `FlatMapMapDataset` does (it sizes its flat-mapped datasets by that bound)."""

    def __init__(self, transform: Any):
        self.transform = transform
        self.__name__ = type(transform).__name__

    def __call__(self, element: Any) -> Sequence[Any]:
        outs = self.transform.flat_map(element)
        outs = outs if isinstance(outs, Sequence) else list(outs)
        bound = self.transform.max_fan_out
        if len(outs) > bound:
            raise ValueError(
                f"{self.__name__}.flat_map made {len(outs)} elements, more than its "
                f"max_fan_out of {bound} (Grain refuses it too: raise max_fan_out)"
            )
        return outs
