"""Padded batches: variable-length keys padded to a fixed length, or to the smallest of a few
bucket lengths that fits the batch, with the true lengths beside them.

>>> batch = pad_elements([{"t": np.arange(3)}, {"t": np.arange(5)}], (("t", (4, 8)),), False,
...                      fixed=False, describe=str)
>>> stack_lengths = [e["t_lengths"] for e in batch]; batch[0]["t"].tolist(), stack_lengths
([0, 1, 2, 0, 0, 0, 0, 0], [3, 5])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpufeed.errors import BatchError, InvalidArgumentError

Pad = tuple[tuple[str, tuple[int, ...]], ...]  # (key, bucket lengths ascending)


def check_pad(pad: Any) -> Pad | None:
    """`{key: length or [lengths]}` as (key, ascending lengths) pairs; raises on bad values."""
    if pad is None:
        return None
    if not isinstance(pad, dict) or not pad:
        raise InvalidArgumentError(
            f"batch pad must be a dict of key -> length or list of bucket "
            f"lengths, such as {{'tokens': [128, 256, 512]}}; got {pad!r}"
        )
    out = []
    for key, lengths in pad.items():
        buckets = lengths if isinstance(lengths, (list, tuple)) else [lengths]
        if not buckets or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in buckets
        ):
            raise InvalidArgumentError(
                f"batch pad length(s) of {key!r} must be positive ints, got {lengths!r}"
            )
        out.append((key, tuple(sorted(set(buckets)))))
    return tuple(out)


def pad_elements(
    elements: Sequence[Any], pad: Pad, cut: bool, fixed: bool, describe: Callable[[int], str]
) -> list[Any]:
    """The elements with each padded key zero-padded along its first axis, and its true length
    in `{key}_lengths`; to the key's largest bucket (`fixed`) or to the smallest bucket that
    fits the longest of `elements`. Longer than the largest bucket: cut with `cut`, else raise."""
    out = [dict(e) if isinstance(e, dict) else e for e in elements]
    for key, buckets in pad:
        arrays = []
        for i, element in enumerate(out):
            if not isinstance(element, dict) or key not in element:
                got = sorted(element) if isinstance(element, dict) else type(element).__name__
                raise BatchError(
                    f"batch(pad={{{key!r}: ...}}): {describe(i)} has no key {key!r} (it has {got})"
                )
            array = np.asarray(element[key])
            if array.ndim == 0:
                raise BatchError(
                    f"batch pad: {key!r} of {describe(i)} is a scalar; padding needs a sequence"
                )
            if len(array) > buckets[-1]:
                if not cut:
                    raise BatchError(
                        f"batch pad: {key!r} of {describe(i)} has length {len(array)}, longer "
                        f"than the largest pad length {buckets[-1]}; pass cut=True to cut it, or "
                        "add a longer bucket"
                    )
                array = array[: buckets[-1]]
            arrays.append(array)
        longest = max((len(a) for a in arrays), default=0)
        target = buckets[-1] if fixed else next(b for b in buckets if b >= longest)
        for element, array in zip(out, arrays):
            padded = np.zeros((target, *array.shape[1:]), array.dtype)
            padded[: len(array)] = array
            element[key] = padded
            element[f"{key}_lengths"] = np.int32(len(array))
    return out


def trim(batch: Any, pad: Pad) -> Any:
    """A stacked batch whose padded keys (at their largest bucket) cut down to the smallest
    bucket that fits its longest element (a view, no copy)."""
    out = dict(batch)
    for key, buckets in pad:
        longest = int(np.max(batch[f"{key}_lengths"], initial=0))
        target = next(b for b in buckets if b >= longest)
        out[key] = batch[key][:, :target]
    return out
