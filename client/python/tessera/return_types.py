"""The named tuples of ops with several outputs, as ``torch.return_types``: ``x.max(1)`` is a
``return_types.max`` whose ``values`` and ``indices`` are DTensors, unpacked like any tuple."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .dtensor import DTensor

__all__ = ["max", "min", "sort", "topk"]


class max(NamedTuple):  # noqa: N801,A001 - torch.return_types' names
    """DTensor.max(dim): the maxima along dim and the index of each (the first of ties)."""

    values: "DTensor"
    indices: "DTensor"


class min(NamedTuple):  # noqa: N801,A001
    """DTensor.min(dim): the minima along dim and the index of each (the first of ties)."""

    values: "DTensor"
    indices: "DTensor"


class sort(NamedTuple):  # noqa: N801
    """DTensor.sort: the sorted values and the index each came from."""

    values: "DTensor"
    indices: "DTensor"


class topk(NamedTuple):  # noqa: N801
    """DTensor.topk: the k largest (or smallest) values and their indices."""

    values: "DTensor"
    indices: "DTensor"
