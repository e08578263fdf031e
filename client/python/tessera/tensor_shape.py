"""A DTensor's views, casts and indexing under torch.Tensor's names, each one op of the
service's registry (ATen's name in the code), or several where torch decomposes one:
``x[...]`` selects, slices and unsqueezes (indexing.py). ``chunk``, ``split`` and ``unbind``
are one op each with one output per piece, their count from the dim's size (indexing.py). A view keeps its Shard placements where every rank's block stays a
block of the view, else the service replicates the input first (``redistributions`` says)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, Tuple

import numpy as np

from . import dtypes as _dt
from .errors import InvalidArgument, Unimplemented
from .indexing import Step, chunk_ranges, plan_index, split_ranges
from .op_args import is_dtype

if TYPE_CHECKING:
    from .dtensor import DTensor

__all__ = ["TensorShape", "size_arg"]


def size_arg(size: Tuple[Any, ...]) -> Tuple[int, ...]:
    """torch's ``*size``: (2, 3), ((2, 3),) or (torch.Size([2, 3]),) as (2, 3)."""
    if len(size) == 1 and hasattr(size[0], "__iter__"):
        size = tuple(size[0])
    try:
        return tuple(builtins.int(s) for s in size)
    except (TypeError, ValueError):
        raise InvalidArgument(f"a size is integers, not {size!r}") from None


class TensorShape:
    """The view, cast and indexing methods of DTensor (a mixin); ``self._op`` runs an op."""

    __slots__ = ()

    def _op(self, op: str, /, *args: Any, **kwargs: Any) -> "DTensor":
        raise NotImplementedError  # DTensor runs it on the service

    def _op_outputs(self, op: str, count: int, /, *args: Any, **kwargs: Any
                    ) -> Tuple["DTensor", ...]:
        raise NotImplementedError  # DTensor runs it: one call, ``count`` outputs

    # -- views -----------------------------------------------------------------------------------

    def view(self, *shape: Any) -> "DTensor":
        """torch.Tensor.view: ``view(4, -1)`` or ``view((4, -1))`` (aten::view)."""
        if len(shape) == 1 and is_dtype(shape[0]):
            raise Unimplemented("DTensor.view(dtype): the service does not reinterpret bytes; "
                                "use .to(dtype)")
        return self._op("view", self, list(size_arg(shape)))

    def reshape(self, *shape: Any) -> "DTensor":
        """torch.Tensor.reshape (aten::reshape)."""
        return self._op("reshape", self, list(size_arg(shape)))

    def view_as(self, other: "DTensor") -> "DTensor":
        return self.view(other.shape)

    def reshape_as(self, other: "DTensor") -> "DTensor":
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "DTensor":
        """torch.Tensor.flatten: dims start_dim..end_dim as one (aten::flatten.using_ints)."""
        return self._op("flatten.using_ints", self, start_dim, end_dim)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> "DTensor":
        """torch.Tensor.unflatten: dim ``dim`` as ``sizes`` (one may be -1)
        (aten::unflatten.int)."""
        return self._op("unflatten.int", self, dim, list(size_arg((sizes,))))

    def unsqueeze(self, dim: int) -> "DTensor":
        """torch.Tensor.unsqueeze: a dim of size 1 at ``dim`` (aten::unsqueeze)."""
        return self._op("unsqueeze", self, dim)

    def squeeze(self, dim: Any = None) -> "DTensor":
        """torch.Tensor.squeeze: every dim of size 1 (aten::squeeze), or ``dim`` if its size
        is 1 (aten::squeeze.dim; several, squeeze.dims)."""
        if dim is None:
            return self._op("squeeze", self)
        if isinstance(dim, (builtins.int, np.integer)):
            return self._op("squeeze.dim", self, dim)
        return self._op("squeeze.dims", self, [builtins.int(d) for d in dim])

    def permute(self, *dims: Any) -> "DTensor":
        """torch.Tensor.permute: ``permute(1, 0, 2)`` or ``permute((1, 0, 2))``
        (aten::permute)."""
        return self._op("permute", self, list(size_arg(dims)))

    def transpose(self, dim0: int, dim1: int) -> "DTensor":
        """torch.Tensor.transpose: swaps two dims; Shard(dim0) becomes Shard(dim1)
        (aten::transpose.int)."""
        return self._op("transpose.int", self, dim0, dim1)

    swapaxes = swapdims = transpose

    def t(self) -> "DTensor":
        """torch.Tensor.t: transpose(0, 1) of a tensor of at most 2 dims (aten::t)."""
        return self._op("t", self)

    @property
    def T(self) -> "DTensor":  # noqa: N802 - torch's name
        """torch.Tensor.T: t() up to 2-D, else the dims reversed (permute)."""
        ndim = self.ndim  # type: ignore[attr-defined]
        return self.t() if ndim <= 2 else self.permute(list(range(ndim))[::-1])

    def expand(self, *sizes: Any) -> "DTensor":
        """torch.Tensor.expand: broadcast to ``sizes`` (-1 keeps a dim) (aten::expand)."""
        return self._op("expand", self, list(size_arg(sizes)))

    def expand_as(self, other: "DTensor") -> "DTensor":
        return self.expand(other.shape)

    def contiguous(self, memory_format: Any = None) -> "DTensor":
        """torch.Tensor.contiguous (aten::contiguous): the service keeps tensors row-major."""
        if memory_format is not None and "contiguous_format" not in str(memory_format):
            raise Unimplemented(f"contiguous(memory_format={memory_format}): the service keeps "
                                "tensors row-major")
        return self._op("contiguous", self)

    def clone(self, *, memory_format: Any = None) -> "DTensor":
        """torch.Tensor.clone: a copy (aten::clone)."""
        return self._op("clone", self)

    def detach(self) -> "DTensor":
        """torch.Tensor.detach: the same values, outside autograd (aten::detach)."""
        return self._op("detach", self)

    # -- casts -----------------------------------------------------------------------------------

    def to(self, *args: Any, dtype: Any = None, copy: bool = False, non_blocking: bool = False,
           device: Any = None, memory_format: Any = None) -> "DTensor":
        """torch.Tensor.to: ``to(dtype)``, ``to(other)`` (its dtype) or ``to(dtype=...)``, a
        cast on the workers (aten::_to_copy). It is the tensor itself when its dtype is known
        to be that one already (and not ``copy``). A DTensor stays on its mesh's devices:
        ``to("cuda")`` is Unimplemented."""
        flags = []
        for a in args:
            if isinstance(a, TensorShape):
                dtype = a.dtype  # type: ignore[attr-defined]
            elif isinstance(a, (builtins.bool, np.bool_)):
                flags.append(a)
            else:
                try:
                    dtype = _dt.as_dtype(a)
                except ValueError:
                    device = a
        copy = builtins.bool(flags[1]) if len(flags) > 1 else copy
        if device is not None:
            raise Unimplemented(f"DTensor.to({device!r}): only a dtype is supported (a DTensor "
                                "stays on its mesh's devices)")
        if dtype is None:
            return self  # type: ignore[return-value]
        d = _dt.as_dtype(dtype)
        known = self._dtype_if_known()
        if not copy and known is not None and known == d:
            return self  # type: ignore[return-value]
        return self._op("_to_copy", self, dtype=d)

    def _dtype_if_known(self) -> Optional[_dt.DType]:
        return None  # DTensor: its dtype once the op that makes it is answered

    def type_as(self, other: "DTensor") -> "DTensor":
        return self.to(other.dtype)

    def float(self) -> "DTensor":
        return self.to(_dt.float32)

    def double(self) -> "DTensor":
        return self.to(_dt.float64)

    def half(self) -> "DTensor":
        return self.to(_dt.float16)

    def bfloat16(self) -> "DTensor":
        return self.to(_dt.bfloat16)

    def int(self) -> "DTensor":
        return self.to(_dt.int32)

    def long(self) -> "DTensor":
        return self.to(_dt.int64)

    def bool(self) -> "DTensor":
        return self.to(_dt.bool)

    # -- indexing and pieces ---------------------------------------------------------------------

    def __getitem__(self, index: Any) -> "DTensor":
        """Basic indexing as torch decomposes it: ints select.int, slices (steps > 0)
        slice.Tensor, None unsqueeze, an Ellipsis the dims between; a DTensor, list or numpy
        array index goes to index.Tensor (lists and arrays distributed Replicate first)."""
        out = self
        for step in plan_index(index, lambda: self.ndim,  # type: ignore[attr-defined]
                               self._index_dims):
            out = self._run_step(out, step)
        return out  # type: ignore[return-value]

    def _run_step(self, tensor: Any, step: Step) -> "DTensor":
        if step.op != "index.Tensor":
            return self._op(step.op, tensor, *step.args)
        indices = [None if i is None else self._index_tensor(i) for i in step.args[0]]
        return self._op("index.Tensor", tensor, indices)

    def _index_tensor(self, item: Any) -> Any:
        """A tensor index as a DTensor: a list, tuple, range or numpy array of integers (as
        int64) or bools, distributed Replicate on this tensor's mesh."""
        if isinstance(item, TensorShape):
            return item
        array = np.asarray(item)
        if np.issubdtype(array.dtype, np.integer):
            array = array.astype(np.int64)
        elif array.dtype != np.bool_:
            raise InvalidArgument(f"indexing: an index is ints, slices, None, Ellipsis, bools or "
                                  f"integer or bool tensors, not {item!r}")
        return self._replicated(array)

    def _replicated(self, array: np.ndarray) -> Any:
        raise NotImplementedError  # DTensor: distribute_tensor on its mesh

    @staticmethod
    def _index_dims(item: Any) -> int:
        """How many dims a tensor index covers: a bool mask its ndim, else 1."""
        if isinstance(item, TensorShape):
            return item.ndim if item.dtype == _dt.bool else 1  # type: ignore[attr-defined]
        array = np.asarray(item)
        return array.ndim if array.dtype == np.bool_ else 1

    def __setitem__(self, index: Any, value: Any) -> None:
        raise Unimplemented("DTensors on the service are not assigned in place")

    def __iter__(self) -> Iterator["DTensor"]:
        """torch.Tensor.__iter__: the unbind(0) pieces."""
        if self.ndim == 0:  # type: ignore[attr-defined]
            raise TypeError("iteration over a 0-d DTensor")
        return iter(self.unbind(0))

    def select(self, dim: int, index: int) -> "DTensor":
        """torch.Tensor.select: the slice at ``index`` of ``dim``, that dim removed
        (aten::select.int)."""
        return self._op("select.int", self, dim, index)

    def narrow(self, dim: int, start: int, length: int) -> "DTensor":
        """torch.Tensor.narrow: ``length`` elements of ``dim`` from ``start`` (aten::narrow)."""
        return self._op("narrow", self, dim, start, length)

    def index_select(self, dim: int, index: "DTensor") -> "DTensor":
        """torch.Tensor.index_select: the entries ``index`` (a 1-D integer DTensor) of
        ``dim`` (aten::index_select)."""
        return self._op("index_select", self, dim, index)

    def gather(self, dim: int, index: "DTensor", *, sparse_grad: bool = False) -> "DTensor":
        """torch.Tensor.gather: ``out[i][j] = self[index[i][j]][j]`` for dim 0, and so on; the
        index an integer DTensor of self's rank (aten::gather)."""
        return self._op("gather", self, dim, self._index_tensor(index), sparse_grad=sparse_grad)

    def scatter(self, dim: int, index: "DTensor", src: Any = None, *, value: Any = None,
                reduce: Optional[str] = None) -> "DTensor":
        """torch.Tensor.scatter (out of place): self with ``src``'s entries (a DTensor) or one
        number written at ``index`` along ``dim`` (aten::scatter.src, aten::scatter.value)."""
        if reduce is not None:
            raise Unimplemented(f"scatter(reduce={reduce!r}): scatter.reduce is not an op of the "
                                "service; scatter_add adds")
        if src is None and value is None:
            raise InvalidArgument("scatter: give src (a DTensor) or value (a number)")
        if src is None:
            src = value
        index = self._index_tensor(index)
        if isinstance(src, TensorShape):
            return self._op("scatter.src", self, dim, index, src)
        return self._op("scatter.value", self, dim, index, src)

    def scatter_add(self, dim: int, index: "DTensor", src: "DTensor") -> "DTensor":
        """torch.Tensor.scatter_add (out of place): self with ``src``'s entries added at
        ``index`` along ``dim`` (aten::scatter_add)."""
        return self._op("scatter_add", self, dim, self._index_tensor(index), src)

    def index_put(self, indices: Sequence[Any], values: Any,
                  accumulate: builtins.bool = False) -> "DTensor":
        """torch.Tensor.index_put (out of place): ``self[indices] = values`` (added with
        ``accumulate``) on a copy; ``indices`` a tuple of integer index tensors, None for a dim
        taken whole (aten::index_put)."""
        if not isinstance(indices, (tuple, list)):
            raise InvalidArgument(f"index_put: indices is a tuple of index tensors, not "
                                  f"{type(indices).__name__}")
        refs = [None if i is None else self._index_tensor(i) for i in indices]
        if not isinstance(values, TensorShape):
            values = self._replicated(np.asarray(
                values, dtype=self.dtype.numpy))  # type: ignore[attr-defined]
        return self._op("index_put", self, refs, values, accumulate)

    def tril(self, diagonal: int = 0) -> "DTensor":
        """torch.Tensor.tril: the lower triangle of the last two dims, the rest zero
        (aten::tril)."""
        return self._op("tril", self, diagonal)

    def triu(self, diagonal: int = 0) -> "DTensor":
        """torch.Tensor.triu: the upper triangle (aten::triu)."""
        return self._op("triu", self, diagonal)

    def chunk(self, chunks: int, dim: int = 0) -> Tuple["DTensor", ...]:
        """torch.Tensor.chunk: ``chunks`` pieces of ceil(size / chunks) along ``dim`` (fewer
        where they do not divide; ``chunks`` empty pieces of an empty dim), one aten::chunk.
        The pieces keep the Shard placements of the other dims."""
        count = len(chunk_ranges(self.size(dim), chunks))  # type: ignore[attr-defined]
        return self._op_outputs("chunk", count, self, chunks, dim)

    def split(self, split_size_or_sections: Any, dim: int = 0) -> Tuple["DTensor", ...]:
        """torch.Tensor.split: pieces of ``split_size`` along ``dim`` (the last smaller; one
        empty piece of an empty dim), one aten::split.Tensor; or of the sizes in a list, which
        must add up to the dim's size, one aten::split_with_sizes."""
        if isinstance(split_size_or_sections, (builtins.int, np.integer)):
            split_size = builtins.int(split_size_or_sections)
            count = len(split_ranges(self.size(dim), split_size))  # type: ignore[attr-defined]
            return self._op_outputs("split.Tensor", count, self, split_size, dim)
        sizes = list(size_arg((split_size_or_sections,)))
        return self._op_outputs("split_with_sizes", len(sizes), self, sizes, dim)

    def unbind(self, dim: int = 0) -> Tuple["DTensor", ...]:
        """torch.Tensor.unbind: every index of ``dim``, that dim removed, one aten::unbind.int;
        () for an empty dim, without a call."""
        count = self.size(dim)  # type: ignore[attr-defined]
        if count == 0:
            return ()
        return self._op_outputs("unbind.int", count, self, dim)
