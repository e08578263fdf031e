"""torch's decomposition of basic indexing into single registry ops, as plans: which op runs
with which arguments (after the tensor itself); and the pieces torch's ``chunk`` and ``split``
make of a dim, whose count is their op's number of outputs. Pure functions of the index and
sizes; the DTensor methods run the plans.

``x[i, a:b:s, None, ...]`` is ``select.int`` for an int, ``slice.Tensor`` for a slice (``:``
alone is no op), ``unsqueeze`` for None (and a bool: True adds a dim of 1, False one of 0), an
Ellipsis the dims it leaves alone. Without tensor indexes no tensor size is needed: the items
before an Ellipsis address dims from the left, those after it from the right (negative dims).
Tensor indexes (a DTensor, a list, a numpy array) go to one ``index.Tensor`` after the basic
ops, at the dims torch gives them (None for the dims they skip)."""

from __future__ import annotations

import builtins
import operator
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .errors import InvalidArgument

__all__ = ["Step", "plan_index", "is_tensor_index", "chunk_ranges", "split_ranges"]


@dataclass(frozen=True)
class Step:
    """One op of a plan: ``op(tensor, *args)``."""

    op: str
    args: Tuple[Any, ...]


def is_tensor_index(item: Any) -> bool:
    """Whether an index item is a tensor index: a list (or, inside an index tuple, a tuple or
    range), a numpy array of one dim or more, or a tensor (anything with a ``shape`` that is not
    an integer)."""
    if isinstance(item, (list, tuple, range)):
        return True
    if isinstance(item, np.ndarray):
        return item.ndim > 0
    return hasattr(item, "shape") and not hasattr(item, "__index__")


def _int(value: Any, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgument(f"indexing: {what} must be an integer or None, not "
                              f"{type(value).__name__}") from None


def _slice_args(item: slice) -> Optional[Tuple[Optional[int], Optional[int], int]]:
    """slice.Tensor's (start, end, step) for ``item``; None for ``:`` (no op)."""
    step = 1 if item.step is None else _int(item.step, "a slice's step")
    if step <= 0:
        raise InvalidArgument(f"indexing: step must be greater than zero, not {step} (a "
                              "DTensor, like a torch tensor, has no negative strides)")
    start = None if item.start is None else _int(item.start, "a slice's start")
    stop = None if item.stop is None else _int(item.stop, "a slice's stop")
    if start in (None, 0) and stop is None and step == 1:
        return None
    return start, stop, step


def _items(index: Any) -> Tuple[Any, ...]:
    items = index if isinstance(index, tuple) else (index,)
    if builtins.sum(1 for i in items if i is Ellipsis) > 1:
        raise InvalidArgument("indexing: an index can only have a single ellipsis ('...')")
    return items


def _basic(item: Any, dim: int) -> Tuple[List[Step], int]:
    """The steps of one basic item at ``dim`` (negative: from the right) and the dims it leaves
    in the result (0 for an int, else 1)."""
    if item is None:
        return [Step("unsqueeze", (dim,))], 1
    if isinstance(item, (builtins.bool, np.bool_)):
        steps = [Step("unsqueeze", (dim,))]
        if not item:
            steps.append(Step("slice.Tensor", (dim, 0, 0, 1)))
        return steps, 1
    if isinstance(item, slice):
        args = _slice_args(item)
        return ([] if args is None else [Step("slice.Tensor", (dim,) + args)]), 1
    return [Step("select.int", (dim, _int(item, "an index")))], 0


def plan_index(index: Any, ndim: Callable[[], int],
               index_dims: Callable[[Any], int] = lambda item: 1) -> List[Step]:
    """The ops of ``tensor[index]``, in order; the last is ``index.Tensor`` with its list of
    indices (the tensor indexes as given, None elsewhere) when ``index`` holds tensor indexes.
    ``ndim()`` is asked only when an Ellipsis and tensor indexes meet; ``index_dims(item)``
    says how many dims a tensor index covers (a bool mask: its ndim; else 1). An index with no
    op at all (``x[:]``, ``x[...]``) is ``alias``."""
    items = _items(index)
    if any(is_tensor_index(i) for i in items):
        steps = _advanced(items, ndim, index_dims)
    else:
        steps = []
        cut = next((n for n, i in enumerate(items) if i is Ellipsis), len(items))
        dim = 0
        for item in items[:cut]:  # from the left
            more, kept = _basic(item, dim)
            steps += more
            dim += kept
        right = 0
        for item in reversed(items[cut + 1:]):  # from the right, past the Ellipsis
            more, kept = _basic(item, -(right + 1))
            steps += more
            right += kept
    return steps or [Step("alias", ())]


def _advanced(items: Sequence[Any], ndim: Callable[[], int],
              index_dims: Callable[[Any], int]) -> List[Step]:
    """torch's applySlicing with tensor indexes: basic items first, the tensor indexes recorded
    at the result's dims, then one index.Tensor."""
    steps: List[Step] = []
    indices: List[Any] = []
    dim = 0
    for item in items:
        if item is Ellipsis:
            specified = builtins.sum(
                index_dims(i) if is_tensor_index(i) else 1 for i in items
                if i is not None and i is not Ellipsis and
                not isinstance(i, (builtins.bool, np.bool_)))
            dim += ndim() - specified
        elif is_tensor_index(item):
            indices += [None] * (dim - len(indices)) + [item]
            dim += 1
        else:
            more, kept = _basic(item, dim)
            steps += more
            dim += kept
    steps.append(Step("index.Tensor", (indices,)))
    return steps


def split_ranges(size: int, split_size: int) -> List[Tuple[int, int]]:
    """torch.split(x, split_size)'s pieces of a dim of ``size``, as [start, end)."""
    if split_size < 0 or (split_size == 0 and size != 0):
        raise InvalidArgument(f"split: split_size can only be 0 if the dim's size is 0 and is "
                              f"never negative, not {split_size} for size {size}")
    count = 1 if split_size == 0 else builtins.max(-(-size // split_size), 1)
    return [(i * split_size, builtins.min(size, (i + 1) * split_size)) for i in range(count)]


def chunk_ranges(size: int, chunks: int) -> List[Tuple[int, int]]:
    """torch.chunk(x, chunks)'s pieces: split by ceil(size / chunks), so fewer than ``chunks``
    where they do not divide; ``chunks`` empty pieces of an empty dim."""
    if chunks <= 0:
        raise InvalidArgument(f"chunk: chunks must be greater than 0, not {chunks}")
    split_size = -(-size // chunks)
    if split_size == 0 and size == 0:
        return [(0, 0)] * chunks
    return split_ranges(size, split_size)

