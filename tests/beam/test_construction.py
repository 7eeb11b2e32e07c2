"""Building the Beam graph without IPython's import and construction-time type checks."""

from __future__ import annotations

import subprocess
import sys
import types

from apache_beam import pipeline as beam_pipeline
from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions

from tpufeed.beam.construction import no_ipython_probe, quick_options


def test_type_checks_are_off_unless_asked_for():
    assert quick_options(PipelineOptions([]), ()).view_as(TypeOptions).pipeline_type_check is False
    kept = ["--pipeline_type_check"]
    assert quick_options(PipelineOptions(kept), kept).view_as(TypeOptions).pipeline_type_check
    off = ["--no_pipeline_type_check"]
    assert not quick_options(PipelineOptions(off), off).view_as(TypeOptions).pipeline_type_check


def test_the_probe_is_skipped_only_inside_and_only_without_ipython(monkeypatch):
    original = beam_pipeline.alter_label_if_ipython, beam_pipeline.is_in_ipython
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    with no_ipython_probe():
        assert beam_pipeline.alter_label_if_ipython is not original[0]
        assert beam_pipeline.is_in_ipython() is False
    assert (beam_pipeline.alter_label_if_ipython, beam_pipeline.is_in_ipython) == original
    # A process that imported IPython may run in it: Beam asks, as it always did.
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    with no_ipython_probe():
        assert (beam_pipeline.alter_label_if_ipython, beam_pipeline.is_in_ipython) == original


def test_a_build_does_not_import_ipython(tmp_path):
    """Beam's own check imports IPython wherever it is installed (0.5-1 s); a build skips it."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"id": {i}}}\n' for i in range(20)))
    code = (
        "import sys\n"
        "from tpufeed.beam import BuildConfig, build\n"
        f"build(BuildConfig(inputs=({str(src)!r},), output={str(tmp_path / 'ds')!r}, num_shards=2))\n"
        "assert 'IPython' not in sys.modules, 'the build imported IPython'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
