"""Where each process's local batch goes in a global `jax.Array`, checked before any transfer.

For a dimension the sharding splits into `parts` over mesh axes, this process's devices hold
`k` of those parts, so its local batch must hold `k` equal slices and the global size is
`local / k * parts` (in a data-parallel mesh: the local batch times the process count).
Dimensions the sharding does not split are replicated: every process must feed the same size.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tpufeed.adapters._leaves import describe_path, map_leaves, numeric_array
from tpufeed.errors import BatchError, InvalidArgumentError


def data_parallel_sharding(axis: str = "data") -> NamedSharding:
    """A 1-D mesh over all devices of all processes, batch dimension split along it.

    Devices are ordered by process, so each process's local batch is one contiguous block of
    the global batch.
    """
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return NamedSharding(Mesh(np.array(devices), (axis,)), PartitionSpec(axis))


def check_sharding(sharding: Any) -> NamedSharding:
    if sharding is None:
        return data_parallel_sharding()
    if not isinstance(sharding, NamedSharding):
        raise InvalidArgumentError(
            f"to_jax needs a jax.sharding.NamedSharding (or None for a 1-D data-parallel mesh), "
            f"got {sharding!r}"
        )
    return sharding


class BatchLayout:
    """Checks each batch's leaves against the sharding and builds the global arrays."""

    def __init__(self, sharding: NamedSharding):
        self.sharding = sharding
        self._spec = tuple(sharding.spec)
        self._multi_process = jax.process_count() > 1
        self._parts, self._local_parts = _split_counts(sharding, len(self._spec))
        self._first_shapes: dict[str, tuple[int, ...]] | None = None
        self._globals: dict[tuple[str, tuple[int, ...]], tuple[int, ...]] = {}

    def place(self, batch: Any, index: int) -> Any:
        """The batch as global jax.Arrays; `index` (from 0) names the batch in errors."""
        leaves: dict[str, tuple[np.ndarray, tuple[int, ...]]] = {}

        def check(path: str, value: Any) -> None:
            array = numeric_array(path, value, "to_jax")
            leaves[path] = (array, self._global_shape(path, array.shape, index))

        map_leaves(check, batch)
        self._check_same_shapes({path: leaf[0].shape for path, leaf in leaves.items()}, index)
        return map_leaves(
            lambda path, _: jax.make_array_from_process_local_data(self.sharding, *leaves[path]),
            batch,
        )

    def _global_shape(self, path: str, shape: tuple[int, ...], index: int) -> tuple[int, ...]:
        key = (path, shape)
        if key not in self._globals:
            self._globals[key] = self._fit(path, shape, index)
        return self._globals[key]

    def _fit(self, path: str, shape: tuple[int, ...], index: int) -> tuple[int, ...]:
        name = describe_path(path)
        if len(shape) < len(self._spec):
            raise InvalidArgumentError(
                f"to_jax: batch leaf {name} has shape {shape}, but the sharding's "
                f"{_spec_text(self._spec)} names {len(self._spec)} dimension(s); every leaf needs "
                "at least that many (a batch dimension first)"
            )
        out = list(shape)
        for dim, (parts, local) in enumerate(zip(self._parts, self._local_parts)):
            if parts == 1:
                continue
            if shape[dim] % local != 0:
                raise InvalidArgumentError(self._misfit(name, shape, dim, parts, local, index))
            out[dim] = shape[dim] // local * parts
        return tuple(out)

    def _misfit(
        self, name: str, shape: tuple[int, ...], dim: int, parts: int, local: int, index: int
    ) -> str:
        size = shape[dim]
        where = (
            f"process {jax.process_index()} of {jax.process_count()}, "
            if self._multi_process
            else ""
        )
        fits = sorted({m for m in (size // local * local, (size // local + 1) * local) if m > 0})
        fix = (
            "as an epoch's last batch can: use batch(..., drop_remainder=True)"
            if index > 0
            else f"Use a per-process batch size such as {' or '.join(map(str, fits))}"
        )
        return (
            f"to_jax: batch leaf {name} has local shape {shape} ({where}batch {index}), but "
            f"the sharding {_spec_text(self._spec)} over mesh {dict(self.sharding.mesh.shape)} "
            f"splits dimension {dim} into {parts} parts, {local} of them on this process's "
            f"devices, so that dimension of the local batch must be a multiple of {local}; "
            f"{size} is not. " + ("This batch differs from the first, " if index > 0 else "") + fix
        )

    def _check_same_shapes(self, shapes: dict[str, tuple[int, ...]], index: int) -> None:
        if self._first_shapes is None:
            self._first_shapes = shapes
            return
        if not self._multi_process or shapes == self._first_shapes:
            return
        for path, shape in shapes.items():
            first = self._first_shapes.get(path)
            if first != shape:
                raise BatchError(
                    f"to_jax: batch {index} leaf {describe_path(path)} has local shape {shape} but "
                    f"the first batch had {first}; in a {jax.process_count()}-process run every "
                    "batch must have the same shape on every process: use "
                    "batch(..., drop_remainder=True) and pad variable-length leaves in a map()"
                )
        raise BatchError(
            f"to_jax: batch {index} has leaves {sorted(shapes)} but the first batch "
            f"had {sorted(self._first_shapes)}"
        )


def _split_counts(sharding: NamedSharding, ndim: int) -> tuple[list[int], list[int]]:
    """Per dimension: parts the sharding splits it into, and how many of them are local."""
    mesh_shape = dict(sharding.mesh.shape)
    parts = []
    for entry in tuple(sharding.spec):
        axes = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        parts.append(math.prod(mesh_shape[a] for a in axes))
    # A probe array with one element per part: each device's slice start is its part number.
    indices = sharding.devices_indices_map(tuple(parts))
    here = jax.process_index()
    # jaxlib's Device is compiled without a stub, so its attributes are unknown to type checkers.
    local = [
        len({idx[d].start or 0 for dev, idx in indices.items() if dev.process_index == here})  # type: ignore[attr-defined]
        for d in range(ndim)
    ]
    return parts, [max(1, k) for k in local]


def _spec_text(spec: tuple) -> str:
    return repr(PartitionSpec(*spec))
