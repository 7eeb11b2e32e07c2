"""Progress of a build: a share of a known total and the time left at the rate so far."""

from __future__ import annotations

__all__ = ["progress"]


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def progress(done: float, total: float, seconds: float, unit: str = "") -> str:
    """`40% of the input bytes, ETA 1 min 5 s`: a share of a known total and the time left at
    the rate so far (no ETA before there is a rate, none once done)."""
    share = f"{done / total:.0%}{unit}" if total else "100%"
    if done <= 0 or seconds <= 0 or done >= total:
        return share
    return f"{share}, ETA {_duration((total - done) * seconds / done)}"
