"""`pack()`'s expected fill over a built dataset, from the lengths its build recorded.

`Dataset.expected_fill()` gives the fit (`tpufeed.ops.pack_fit.PackFit`) of a pipeline whose
first stage is `pack`, over a dataset of `Dataset.open` whose build recorded the packed key's
lengths (`Dataset.statistics`); anything else raises, saying why. `pack()` itself logs the
expected fill on the "tpufeed" logger where it can be known, and warns where the row length
fits poorly (`PackFit.advice`).
"""

from __future__ import annotations

import logging
import warnings

from tpufeed.chain.base import Chain
from tpufeed.errors import InvalidArgumentError, TpufeedError
from tpufeed.ops.pack import Pack
from tpufeed.ops.pack_fit import PackFit, pack_fit
from tpufeed.ops.registry import stage_label
from tpufeed.sources.built.statistics import DatasetStatistics

__all__ = ["expected_fit", "note_fit"]

log = logging.getLogger("tpufeed")


def expected_fit(chain: Chain) -> PackFit:
    """The fit of `chain`'s pack stage to its source's recorded lengths; raises
    InvalidArgumentError saying why it cannot be known."""
    found = _fit_or_why(chain, _statistics(chain))
    if isinstance(found, str):
        raise InvalidArgumentError(f"expected_fill: {found}")
    return found


def note_fit(chain: Chain) -> None:
    """Logs the expected fill of a pack just chained, where the build recorded the lengths,
    and warns when its row length fits poorly; says nothing where nothing is recorded."""
    try:
        statistics = _statistics(chain)
        if statistics is None or not statistics.recorded:
            return
        found = _fit_or_why(chain, statistics)
    except TpufeedError as e:  # damaged statistics: the pipeline still runs
        warnings.warn(f"pack: no expected fill: {e}", stacklevel=3)
        return
    if isinstance(found, str):
        return
    log.info("%s", found)
    if found.advice is not None:
        warnings.warn(str(found), stacklevel=3)


def _statistics(chain: Chain) -> DatasetStatistics | None:
    source = None if chain._source is None else chain._source.source
    found = getattr(source, "statistics", None)
    return found if isinstance(found, DatasetStatistics) else None


def _fit_or_why(chain: Chain, statistics: DatasetStatistics | None) -> PackFit | str:
    """The fit, or why there is none."""
    if chain._mixture is not None:
        return "a mixture's fill is not estimated: ask each component's pack"
    packs = [(i, stage) for i, stage in enumerate(chain._stages) if isinstance(stage, Pack)]
    if not packs:
        return "the pipeline has no pack stage: chain pack(...) first"
    place, pack = packs[0]
    before = chain._stages[:place]
    if before:
        return (
            f"{stage_label(before[0])} comes before pack: the build's lengths are those of "
            "the records as stored, not of what the stages make of them"
        )
    if statistics is None or not statistics.recorded:
        why = "not a dataset of Dataset.open" if statistics is None else statistics.why
        return f"no lengths were recorded ({why})"
    if len(pack.lengths) != 1:
        return "pack packs several keys together; the build recorded each key's lengths alone"
    key, length = pack.lengths[0]
    field = (statistics.fields or {}).get(key)
    if field is None or field.lengths is None:
        recorded = sorted(k for k, f in (statistics.fields or {}).items() if f.lengths)
        return f"the build recorded no lengths of {key!r} (it did of {recorded})"
    counts = field.lengths
    return pack_fit(
        counts.bounded_rows(), counts.count, length, pack.open_rows, pack.method, pack.cut, key
    )
