"""The input pipeline's spans in the profiler its user opens (JAX's, PyTorch's) and on the
timeline.

While a profiler records, the parent marks its work: `tpufeed/next` (the consumer's wait for an
item), `tpufeed/batch`, `tpufeed/pack`, `tpufeed/mix` (the stream stages) and `tpufeed/to_device`
(`to_jax`'s transfer to the devices). JAX
gets `jax.profiler.TraceAnnotation`s, PyTorch `torch.profiler.record_function`s. While a
timeline records (`tpufeed.trace`), `next` and the stream stages go on it too, without the
prefix (the other stages are there already: `StageClock` puts them there).

Only frameworks already imported are asked (found in `sys.modules`): tpufeed imports none.
Whether one records:
- JAX: `TraceAnnotation.is_enabled()`, TSL's TraceMe recorder check. It is true during any
  session of the process's profiler: `jax.profiler.trace` / `start_trace`, and a capture through
  `jax.profiler.start_server` (TensorBoard, XProf) too, which a Python-level flag such as
  `jax._src.profiler._profile_state` would miss.
- PyTorch: `torch._C._autograd._profiler_enabled()`, true under every torch profiler
  (`torch.profiler.profile`, `torch.autograd.profiler.profile`, `emit_nvtx`).

Each check costs about 10 ns, and they run once per `next()`: `check()` asks, and every other
site in the process reads its answer (`latest()`, one global read), so a profiler started
between two items is seen from the next item on. Off, a site costs that read and one `if`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from tpufeed.observe import timeline

Annotate = Callable[[str], AbstractContextManager[Any]]
Probe = tuple[Callable[[], bool], Annotate]  # (is it recording, a span named so)

PREFIX = "tpufeed/"


def _jax() -> Probe | None:
    annotation = getattr(getattr(sys.modules.get("jax"), "profiler", None), "TraceAnnotation", None)
    if annotation is None:  # jax is still being imported
        return None
    return annotation.is_enabled, annotation


def _torch() -> Probe | None:
    torch: Any = sys.modules.get("torch")
    try:
        return torch._C._autograd._profiler_enabled, torch.autograd.profiler.record_function
    except AttributeError:  # torch is still being imported
        return None


_FRAMEWORKS: dict[str, Callable[[], Probe | None]] = {"jax": _jax, "torch": _torch}
_probes: dict[str, Probe] = {}  # the frameworks found imported so far
_modules_seen = -1  # len(sys.modules) when they were last looked for


class Spans:
    """What records now: the profilers' span makers, and this process's timeline if any."""

    __slots__ = ("annotations", "recording")

    def __init__(self, annotations: tuple[Annotate, ...], recording: timeline.Timeline | None):
        self.annotations, self.recording = annotations, recording

    def __call__(
        self, name: str, category: str = "stream", args: Any = None, on_timeline: bool = True
    ) -> AbstractContextManager[None]:
        """A span `tpufeed/<name>` in each profiler, and `name` on the timeline where asked
        (`on_timeline=False` where `StageClock` already puts the work there)."""
        return _Span(self, name, category, args, on_timeline and self.recording is not None)


class _Span:
    __slots__ = ("spans", "name", "category", "args", "timed", "entered", "started")

    def __init__(self, spans: Spans, name: str, category: str, args: Any, timed: bool):
        self.spans, self.name, self.category, self.args, self.timed = (
            spans,
            name,
            category,
            args,
            timed,
        )

    def __enter__(self) -> None:
        self.entered = [annotate(PREFIX + self.name) for annotate in self.spans.annotations]
        for annotation in self.entered:
            annotation.__enter__()
        self.started = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        if self.timed:
            seconds = time.perf_counter() - self.started
            timeline.complete(self.name, seconds, self.category, self.args)
        for annotation in reversed(self.entered):
            annotation.__exit__(*exc)


_latest: Spans | None = None  # the answer of the last check
_NOTHING = nullcontext()


def check() -> Spans | None:
    """Asks the imported profilers and the timeline whether any records (once per `next()`);
    None when none does."""
    global _latest, _modules_seen
    if len(_probes) < len(_FRAMEWORKS) and len(sys.modules) != _modules_seen:
        _modules_seen = len(sys.modules)  # looked again only after an import
        for name, find in _FRAMEWORKS.items():
            if name not in _probes and name in sys.modules:
                probe = find()
                if probe is not None:
                    _probes[name] = probe
                else:  # still being imported: look again next time
                    _modules_seen = -1
    annotations: tuple[Annotate, ...] = ()
    for recording, annotate in _probes.values():
        if recording():
            annotations += (annotate,)
    recorded = timeline.recording()
    _latest = Spans(annotations, recorded) if annotations or recorded is not None else None
    return _latest


def latest() -> Spans | None:
    """The answer of the last `check()` in this process (what a thread that is not the
    consumer's marks its work by)."""
    return _latest


def span(name: str, category: str = "stream", on_timeline: bool = True) -> AbstractContextManager:
    """`name`'s span by the last check, or nothing (one shared no-op) when nothing records."""
    spans = _latest
    if spans is None:
        return _NOTHING
    return spans(name, category, on_timeline=on_timeline)
