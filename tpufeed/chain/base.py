"""What the chainable methods read of a pipeline, and how each makes the next pipeline.

`Dataset` holds the fields and gives `_replace`; the mixins of this package (order, stages,
settings) build on the helpers here, so none of them touches the dataclass itself.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.registry import Stage, check_next
from tpufeed.order.sharding import Sharding
from tpufeed.order.slicing import Slicing
from tpufeed.run.launch import RunSettings
from tpufeed.run.mixture import Mixture
from tpufeed.sources.view import SourceView

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Chain", "SourceName"]


class Chain(abc.ABC):
    """A pipeline's fields, as the chainable methods read them (`Dataset` defines them)."""

    _source: SourceView | None
    _seed: int | None
    _window: int | None
    _sharding: Sharding
    _stages: tuple[Stage, ...]
    _epochs: int | None
    _max_errors: int
    _settings: RunSettings
    _mixture: Mixture | None
    _slicing: Slicing

    @abc.abstractmethod
    def _replace(self, **changes: Any) -> Self:
        """This pipeline with `changes` to its fields."""

    def _add(self, stage: Stage) -> Self:
        check_next(self._stages, stage)
        return self._replace(_stages=self._stages + (stage,))

    def _set(self, **settings: Any) -> Self:
        """This pipeline with `settings` changed in its `RunSettings`."""
        return self._replace(_settings=dataclasses.replace(self._settings, **settings))

    def _not_mixture(self, what: str) -> None:
        if self._mixture is not None:
            raise InvalidArgumentError(
                f"{what} belongs to each component of a mixture, not to the mixture: "
                "set it on the datasets given to Dataset.mix"
            )

    def _view(self, what: str) -> SourceView:
        """The source underneath, which `what` needs; a mixture has none of its own."""
        self._not_mixture(what)
        if self._source is None:
            raise InvalidArgumentError(f"{what} needs a source, and this Dataset has none")
        return self._source


_Pipeline = TypeVar("_Pipeline", bound="Chain")


class SourceName:
    """`source`, read on a pipeline and on its class: `ds.source` is the record source
    underneath, and `Dataset.source(x)` is Grain's spelling of `Dataset.from_source(x)`. A
    descriptor, so that one name serves both and type checkers see each."""

    @overload
    def __get__(self, pipeline: None, owner: type[_Pipeline]) -> Callable[[Any], _Pipeline]: ...

    @overload
    def __get__(self, pipeline: _Pipeline, owner: type[_Pipeline]) -> Any: ...

    def __get__(self, pipeline: Chain | None, owner: type[Chain]) -> Any:
        if pipeline is None:
            return getattr(owner, "from_source")  # noqa: B009 (SourceConstructors' method)
        return pipeline._view("source").source
