"""Building the build's Beam graph without the seconds that a small build cannot afford.

Two costs of Beam's pipeline construction that tpufeed's own graph does not need (measured on
a 2-core machine, for a graph of ~30 steps):
- Beam asks IPython, at every top-level step, whether it runs in a notebook, to prefix the
  step's label with the cell number (and once more after the run, to clean up). Where IPython
  is installed but not running (a script, a terminal, a worker), that imports IPython: 0.5-1 s. A process that has not imported
  IPython is not running in it, so there the question is skipped (`no_ipython_probe`).
- Construction-time type checking inspects every step's signature and type hints: ~0.2 s.
  tpufeed's steps are fixed (the user's --transform functions are not Beam steps), so the
  check is off unless `--pipeline_type_check` is passed (`quick_options`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from apache_beam import pipeline as beam_pipeline
from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions

__all__ = ["no_ipython_probe", "quick_options"]

_TYPE_CHECK_FLAGS = ("pipeline_type_check", "no_pipeline_type_check")


def quick_options(options: PipelineOptions, beam_args: Sequence[str]) -> PipelineOptions:
    """`options` with construction-time type checking off, unless `beam_args` set it."""
    named = {arg.lstrip("-").split("=", 1)[0] for arg in beam_args}
    if named.isdisjoint(_TYPE_CHECK_FLAGS):
        options.view_as(TypeOptions).pipeline_type_check = False
    return options


def _not_in_ipython(transform: object, pvalueish: object) -> None:
    """Beam's label change for notebook cells, which is a no-op outside IPython."""


def _false() -> bool:
    return False


@contextmanager
def no_ipython_probe() -> Iterator[None]:
    """Inside: Beam's pipeline construction and run skip their IPython checks (a label per
    top-level step, a question after the run) where IPython is not imported."""
    if "IPython" in sys.modules:  # it may be running: let Beam ask it
        yield
        return
    saved = beam_pipeline.alter_label_if_ipython, beam_pipeline.is_in_ipython
    beam_pipeline.alter_label_if_ipython, beam_pipeline.is_in_ipython = _not_in_ipython, _false
    try:
        yield
    finally:
        beam_pipeline.alter_label_if_ipython, beam_pipeline.is_in_ipython = saved
