"""A DTensor's math under torch.Tensor's names: operators, pointwise ops, comparisons,
reductions, sorting, softmax and matmul, each one op of the service's registry (ATen's name in
the code). A number operand is a wrapped number, as in torch: ``int32_dt + 2`` stays int32,
``int32_dt + 2.5`` is float32. An op with several outputs (``x.max(1)``, ``x.sort()``) returns
torch's named tuple of them (return_types.py). tensor_shape.py holds the views and indexing."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import return_types
from .errors import InvalidArgument, Unimplemented

if TYPE_CHECKING:
    from .dtensor import DTensor

__all__ = ["TensorMath", "is_number", "dims_arg", "moment_args"]

Dims = Optional[Union[int, Sequence[int]]]


def is_number(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy scalar (a wrapped number when it meets a
    tensor)."""
    return isinstance(value, (builtins.bool, builtins.int, builtins.float, np.number, np.bool_))


def dims_arg(dim: Dims) -> Optional[List[int]]:
    """An ``int[1]?`` argument: an int is one dim, None stays None."""
    if dim is None:
        return None
    if isinstance(dim, (builtins.int, np.integer)):
        return [builtins.int(dim)]
    return [builtins.int(d) for d in dim]


def _is_dim(value: Any) -> bool:
    """Whether ``value`` is one dim (an int, not a bool)."""
    return isinstance(value, (builtins.int, np.integer)) and \
        not isinstance(value, (builtins.bool, np.bool_))


def moment_args(name: str, dim: Any, unbiased: Optional[bool], correction: Any
                ) -> Tuple[Optional[List[int]], Any]:
    """The ``dim`` and ``correction`` of var, std, var_mean and std_mean from torch's forms:
    ``(dim, unbiased, keepdim)``, ``(unbiased)`` or ``correction=`` (1 by default;
    ``unbiased=False`` is 0)."""
    if isinstance(dim, (builtins.bool, np.bool_)):  # var(unbiased)
        dim, unbiased = None, builtins.bool(dim)
    if unbiased is not None and correction is not None:
        raise InvalidArgument(f"{name}: pass unbiased or correction, not both")
    if correction is None:
        correction = 0 if unbiased is False else 1
    return dims_arg(dim), correction


def _keywords(**kwargs: Any) -> dict:
    """The keyword arguments that differ from their schema default (None)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def _unary(op: str, doc: str) -> Callable[..., "DTensor"]:
    """A method ``x.<name>()`` that runs ``op(x)``."""
    def method(self: "TensorMath") -> "DTensor":
        return self._op(op, self)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"torch.Tensor.{op}: {doc} (aten::{op})."
    return method


def _compare(name: str, doc: str) -> Callable[..., "DTensor"]:
    """A comparison ``x.<name>(other)``: ``<name>.Scalar`` with a number, else
    ``<name>.Tensor``; the result is bool."""
    def method(self: "TensorMath", other: Any) -> "DTensor":
        return self._op(f"{name}.Scalar" if is_number(other) else f"{name}.Tensor", self, other)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"torch.Tensor.{name}: {doc}, elementwise (bool)."
    return method


def _binary(name: str, op: str, doc: str) -> Callable[..., "DTensor"]:
    """A method ``x.<name>(other)`` that runs ``op(x, other)``, a number wrapped."""
    def method(self: "TensorMath", other: Any) -> "DTensor":
        return self._op(op, self, other)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"torch.Tensor.{name}: {doc} (aten::{op})."
    return method


def _operand(other: Any) -> bool:
    """Whether an operator takes ``other`` (else it answers NotImplemented)."""
    return isinstance(other, TensorMath) or is_number(other)


class TensorMath:
    """The math methods of DTensor (a mixin): each runs ``self._op(aten_name, *args,
    **kwargs)``, which DTensor sends on the session's op stream."""

    __slots__ = ()

    def _op(self, op: str, /, *args: Any, **kwargs: Any) -> "DTensor":
        raise NotImplementedError  # DTensor runs it on the service

    def _op_outputs(self, op: str, count: int, /, *args: Any, **kwargs: Any
                    ) -> Tuple["DTensor", ...]:
        raise NotImplementedError  # DTensor runs it: one call, ``count`` outputs

    # -- operators -------------------------------------------------------------------------------

    def __add__(self, other: Any) -> "DTensor":
        return self.add(other) if _operand(other) else NotImplemented

    def __radd__(self, other: Any) -> "DTensor":
        return self.add(other) if _operand(other) else NotImplemented

    def __sub__(self, other: Any) -> "DTensor":
        return self.sub(other) if _operand(other) else NotImplemented

    def __rsub__(self, other: Any) -> "DTensor":
        """other - self: ``rsub.Scalar``, as torch."""
        return self._op("rsub.Scalar", self, other) if is_number(other) else NotImplemented

    def __mul__(self, other: Any) -> "DTensor":
        return self.mul(other) if _operand(other) else NotImplemented

    def __rmul__(self, other: Any) -> "DTensor":
        return self.mul(other) if _operand(other) else NotImplemented

    def __truediv__(self, other: Any) -> "DTensor":
        return self.div(other) if _operand(other) else NotImplemented

    def __rtruediv__(self, other: Any) -> "DTensor":
        """other / self: ``reciprocal(self) * other``, as torch."""
        return self.reciprocal().mul(other) if is_number(other) else NotImplemented

    def __floordiv__(self, other: Any) -> "DTensor":
        return self.floor_divide(other) if _operand(other) else NotImplemented

    def __rfloordiv__(self, other: Any) -> "DTensor":
        return self._op("floor_divide", other, self) if is_number(other) else NotImplemented

    def __mod__(self, other: Any) -> "DTensor":
        return self.remainder(other) if _operand(other) else NotImplemented

    def __rmod__(self, other: Any) -> "DTensor":
        return self._op("remainder.Tensor", other, self) if is_number(other) else NotImplemented

    def __pow__(self, exponent: Any) -> "DTensor":
        return self.pow(exponent) if _operand(exponent) else NotImplemented

    def __rpow__(self, other: Any) -> "DTensor":
        """other ** self: ``pow.Tensor_Tensor`` with ``other`` a wrapped number."""
        return self._op("pow.Tensor_Tensor", other, self) if is_number(other) else NotImplemented

    def __matmul__(self, other: Any) -> "DTensor":
        return self.matmul(other) if isinstance(other, TensorMath) else NotImplemented

    def __neg__(self) -> "DTensor":
        return self.neg()

    def __pos__(self) -> "DTensor":
        return self._op("alias", self)

    def __abs__(self) -> "DTensor":
        return self.abs()

    def __invert__(self) -> "DTensor":
        """~x: ``bitwise_not`` (on bool, logical not), as torch."""
        return self.bitwise_not()

    def __and__(self, other: Any) -> "DTensor":
        """x & y: ``bitwise_and`` (on bool, logical and), as torch."""
        return self.bitwise_and(other) if _operand(other) else NotImplemented

    __rand__ = __and__

    def __or__(self, other: Any) -> "DTensor":
        return self.bitwise_or(other) if _operand(other) else NotImplemented

    __ror__ = __or__

    def __xor__(self, other: Any) -> "DTensor":
        return self.bitwise_xor(other) if _operand(other) else NotImplemented

    __rxor__ = __xor__

    def __eq__(self, other: Any) -> "DTensor":  # type: ignore[override]
        return self.eq(other) if _operand(other) else NotImplemented

    def __ne__(self, other: Any) -> "DTensor":  # type: ignore[override]
        return self.ne(other) if _operand(other) else NotImplemented

    def __lt__(self, other: Any) -> "DTensor":
        return self.lt(other) if _operand(other) else NotImplemented

    def __le__(self, other: Any) -> "DTensor":
        return self.le(other) if _operand(other) else NotImplemented

    def __gt__(self, other: Any) -> "DTensor":
        return self.gt(other) if _operand(other) else NotImplemented

    def __ge__(self, other: Any) -> "DTensor":
        return self.ge(other) if _operand(other) else NotImplemented

    __hash__ = object.__hash__  # a handle hashes by identity, as a torch tensor

    # -- pointwise -------------------------------------------------------------------------------

    neg = _unary("neg", "-x")
    negative = neg
    abs = _unary("abs", "|x|")
    absolute = abs
    sign = _unary("sign", "-1, 0 or 1")
    exp = _unary("exp", "e ** x")
    expm1 = _unary("expm1", "e ** x - 1")
    log = _unary("log", "the natural logarithm")
    log1p = _unary("log1p", "log(1 + x)")
    log2 = _unary("log2", "the base-2 logarithm")
    sqrt = _unary("sqrt", "the square root")
    rsqrt = _unary("rsqrt", "1 / sqrt(x)")
    reciprocal = _unary("reciprocal", "1 / x")
    sin = _unary("sin", "the sine")
    cos = _unary("cos", "the cosine")
    tanh = _unary("tanh", "the hyperbolic tangent")
    sigmoid = _unary("sigmoid", "1 / (1 + e ** -x)")
    relu = _unary("relu", "max(x, 0)")
    erf = _unary("erf", "the error function")
    floor = _unary("floor", "rounded down")
    ceil = _unary("ceil", "rounded up")
    trunc = _unary("trunc", "rounded towards zero")
    fix = trunc
    logical_not = _unary("logical_not", "not x (bool)")
    bitwise_not = _unary("bitwise_not", "~x (on bool, not x)")
    isnan = _unary("isnan", "whether x is NaN (bool)")
    isinf = _unary("isinf", "whether x is infinite (bool)")
    isfinite = _unary("isfinite", "whether x is finite (bool)")

    def round(self, decimals: int = 0) -> "DTensor":
        """torch.Tensor.round: to the nearest integer, halves to even (aten::round); with
        ``decimals``, aten::round.decimals."""
        if decimals == 0:
            return self._op("round", self)
        return self._op("round.decimals", self, decimals=decimals)

    def gelu(self, approximate: str = "none") -> "DTensor":
        """gelu: the exact erf form, or ``approximate="tanh"`` (aten::gelu)."""
        return self._op("gelu", self, **({} if approximate == "none" else
                                         {"approximate": approximate}))

    def square(self) -> "DTensor":
        """torch.Tensor.square: x ** 2 (aten::pow.Tensor_Scalar, as torch decomposes it)."""
        return self._op("pow.Tensor_Scalar", self, 2)

    # -- binary ----------------------------------------------------------------------------------

    def add(self, other: Any, *, alpha: Any = 1) -> "DTensor":
        """torch.Tensor.add: self + alpha * other, broadcasting (aten::add.Tensor)."""
        return self._op("add.Tensor", self, other, **({} if alpha == 1 else {"alpha": alpha}))

    def sub(self, other: Any, *, alpha: Any = 1) -> "DTensor":
        """torch.Tensor.sub: self - alpha * other (aten::sub.Tensor)."""
        return self._op("sub.Tensor", self, other, **({} if alpha == 1 else {"alpha": alpha}))

    subtract = sub
    mul = _binary("mul", "mul.Tensor", "self * other, broadcasting")
    multiply = mul

    def div(self, other: Any, *, rounding_mode: Optional[str] = None) -> "DTensor":
        """torch.Tensor.div: true division (integers give float32), or ``rounding_mode``
        "trunc" or "floor" (aten::div.Tensor, div.Tensor_mode)."""
        if rounding_mode is None:
            return self._op("div.Tensor", self, other)
        return self._op("div.Tensor_mode", self, other, rounding_mode=rounding_mode)

    divide = div
    true_divide = _binary("true_divide", "div.Tensor", "true division")
    floor_divide = _binary("floor_divide", "floor_divide", "division rounded down")
    remainder = _binary("remainder", "remainder.Tensor",
                        "the remainder with the divisor's sign (Python's %)")
    maximum = _binary("maximum", "maximum", "the larger of the two, elementwise")
    minimum = _binary("minimum", "minimum", "the smaller of the two, elementwise")
    logical_and = _binary("logical_and", "logical_and", "both non-zero (bool)")
    logical_or = _binary("logical_or", "logical_or", "either non-zero (bool)")
    logical_xor = _binary("logical_xor", "logical_xor", "exactly one non-zero (bool)")
    bitwise_and = _binary("bitwise_and", "bitwise_and.Tensor", "self & other")
    bitwise_or = _binary("bitwise_or", "bitwise_or.Tensor", "self | other")
    bitwise_xor = _binary("bitwise_xor", "bitwise_xor.Tensor", "self ^ other")

    def pow(self, exponent: Any) -> "DTensor":
        """torch.Tensor.pow: self ** exponent (aten::pow.Tensor_Scalar with a number, else
        pow.Tensor_Tensor)."""
        op = "pow.Tensor_Scalar" if is_number(exponent) else "pow.Tensor_Tensor"
        return self._op(op, self, exponent)

    eq = _compare("eq", "self == other")
    ne = _compare("ne", "self != other")
    lt = _compare("lt", "self < other")
    le = _compare("le", "self <= other")
    gt = _compare("gt", "self > other")
    ge = _compare("ge", "self >= other")
    not_equal, less, less_equal, greater, greater_equal = ne, lt, le, gt, ge

    def where(self, condition: Any, other: Any) -> "DTensor":
        """torch.Tensor.where: self where ``condition``, else ``other`` (aten::where.self)."""
        return self._op("where.self", condition, self, other)

    def masked_fill(self, mask: Any, value: Any) -> "DTensor":
        """torch.Tensor.masked_fill: ``value`` where ``mask`` (aten::masked_fill.Scalar; a
        0-d DTensor value, masked_fill.Tensor)."""
        op = "masked_fill.Scalar" if is_number(value) else "masked_fill.Tensor"
        return self._op(op, self, mask, value)

    def clamp(self, min: Any = None, max: Any = None) -> "DTensor":  # noqa: A002 - torch's
        """torch.Tensor.clamp: into [min, max], either bound None (aten::clamp; DTensor
        bounds, clamp.Tensor)."""
        op = "clamp.Tensor" if isinstance(min, TensorMath) or isinstance(max, TensorMath) \
            else "clamp"
        return self._op(op, self, min, max)

    clip = clamp

    def clamp_min(self, min: Any) -> "DTensor":  # noqa: A002 - torch's name
        """torch.Tensor.clamp_min: max(self, min) (aten::clamp_min)."""
        return self._op("clamp_min", self, min)

    def clamp_max(self, max: Any) -> "DTensor":  # noqa: A002 - torch's name
        """torch.Tensor.clamp_max: min(self, max) (aten::clamp_max)."""
        return self._op("clamp_max", self, max)

    # -- reductions ------------------------------------------------------------------------------

    def sum(self, dim: Dims = None, keepdim: bool = False, *, dtype: Any = None) -> "DTensor":
        """torch.Tensor.sum: over ``dim`` (an int or ints; None: every dim); integers sum to
        int64 unless ``dtype`` (aten::sum, sum.dim_IntList)."""
        if dim is None and not keepdim:
            return self._op("sum", self, **_keywords(dtype=dtype))
        return self._op("sum.dim_IntList", self, dims_arg(dim), keepdim, **_keywords(dtype=dtype))

    def mean(self, dim: Dims = None, keepdim: bool = False, *, dtype: Any = None) -> "DTensor":
        """torch.Tensor.mean: over ``dim``, exact over uneven shards (aten::mean, mean.dim)."""
        if dim is None and not keepdim:
            return self._op("mean", self, **_keywords(dtype=dtype))
        return self._op("mean.dim", self, dims_arg(dim), keepdim, **_keywords(dtype=dtype))

    def amax(self, dim: Dims = (), keepdim: bool = False) -> "DTensor":
        """torch.Tensor.amax: the maximum over ``dim`` (() or None: every dim) (aten::amax)."""
        return self._op("amax", self, dims_arg(dim) or [], keepdim)

    def amin(self, dim: Dims = (), keepdim: bool = False) -> "DTensor":
        """torch.Tensor.amin: the minimum over ``dim`` (aten::amin)."""
        return self._op("amin", self, dims_arg(dim) or [], keepdim)

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """torch.Tensor.max: ``x.max()`` the maximum (aten::amax over every dim);
        ``x.max(other)`` maximum(x, other); ``x.max(dim)`` torch's (values, indices) as a
        return_types.max, the index the first of ties (aten::max.dim). A list or tuple of
        dims, which torch does not take, gives the values only (amax), as before."""
        if isinstance(dim, TensorMath):
            return self.maximum(dim)
        if _is_dim(dim):
            return return_types.max(*self._op_outputs("max.dim", 2, self, dim, keepdim))
        return self.amax(dim, keepdim)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        """torch.Tensor.min: as max, with amin, minimum, min.dim and return_types.min."""
        if isinstance(dim, TensorMath):
            return self.minimum(dim)
        if _is_dim(dim):
            return return_types.min(*self._op_outputs("min.dim", 2, self, dim, keepdim))
        return self.amin(dim, keepdim)

    def prod(self, dim: Optional[int] = None, keepdim: bool = False, *, dtype: Any = None
             ) -> "DTensor":
        """torch.Tensor.prod: the product of every element (aten::prod), or over one dim
        (aten::prod.dim_int)."""
        if dim is None:
            return self._op("prod", self, **_keywords(dtype=dtype))
        return self._op("prod.dim_int", self, dim, keepdim, **_keywords(dtype=dtype))

    def any(self, dim: Dims = None, keepdim: bool = False) -> "DTensor":
        """torch.Tensor.any: whether any element is non-zero (aten::any; over one dim,
        any.dim; over several, any.dims)."""
        return self._bool_reduction("any", dim, keepdim)

    def all(self, dim: Dims = None, keepdim: bool = False) -> "DTensor":
        """torch.Tensor.all: whether every element is non-zero (aten::all, all.dim, all.dims)."""
        return self._bool_reduction("all", dim, keepdim)

    def _bool_reduction(self, name: str, dim: Dims, keepdim: bool) -> "DTensor":
        if dim is None:
            return self._op(name, self)
        if isinstance(dim, (builtins.int, np.integer)):
            return self._op(f"{name}.dim", self, dim, keepdim)
        return self._op(f"{name}.dims", self, dims_arg(dim), keepdim)

    def argmax(self, dim: Optional[int] = None, keepdim: bool = False) -> "DTensor":
        """torch.Tensor.argmax: the index of the maximum (None: of the flattened tensor),
        int64 (aten::argmax)."""
        return self._op("argmax", self, dim, keepdim)

    def argmin(self, dim: Optional[int] = None, keepdim: bool = False) -> "DTensor":
        """torch.Tensor.argmin (aten::argmin)."""
        return self._op("argmin", self, dim, keepdim)

    def var(self, dim: Any = None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
            correction: Any = None) -> "DTensor":
        """torch.Tensor.var: the variance over ``dim`` with ``correction`` (1 by default;
        ``unbiased=False`` is 0), as ``var(dim, unbiased, keepdim)`` or ``var(unbiased)`` too
        (aten::var.correction)."""
        return self._moment("var", dim, unbiased, keepdim, correction)

    def std(self, dim: Any = None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
            correction: Any = None) -> "DTensor":
        """torch.Tensor.std: the square root of var (aten::std.correction)."""
        return self._moment("std", dim, unbiased, keepdim, correction)

    def _moment(self, name: str, dim: Any, unbiased: Optional[bool], keepdim: bool,
                correction: Any) -> "DTensor":
        dims, correction = moment_args(name, dim, unbiased, correction)
        return self._op(f"{name}.correction", self, dims, correction=correction,
                        keepdim=keepdim)

    def logsumexp(self, dim: Union[int, Sequence[int]], keepdim: bool = False) -> "DTensor":
        """torch.Tensor.logsumexp: log(sum(exp(x))) over ``dim``, stably (aten::logsumexp)."""
        return self._op("logsumexp", self, dims_arg(dim), keepdim)

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False,
             dtype: Any = None) -> "DTensor":
        """torch.Tensor.norm: the vector p-norm over ``dim`` (None: every dim), ``p`` a number,
        inf or -inf, or "fro" (2) (aten::linalg_vector_norm)."""
        if p == "fro" or p is None:
            p = 2
        if isinstance(p, str):
            raise Unimplemented(f"norm(p={p!r}): only vector norms (a number, inf, -inf or "
                                "'fro') run on the service")
        dims = None if dim is None else dims_arg(dim)
        return self._op("linalg_vector_norm", self, p, dims, keepdim, **_keywords(dtype=dtype))

    def cumsum(self, dim: int, *, dtype: Any = None) -> "DTensor":
        """torch.Tensor.cumsum: the running sum along ``dim`` (aten::cumsum)."""
        return self._op("cumsum", self, dim, **_keywords(dtype=dtype))

    def cumprod(self, dim: int, *, dtype: Any = None) -> "DTensor":
        """torch.Tensor.cumprod: the running product along ``dim`` (aten::cumprod)."""
        return self._op("cumprod", self, dim, **_keywords(dtype=dtype))

    def softmax(self, dim: int, dtype: Any = None) -> "DTensor":
        """torch.Tensor.softmax: exp(x) / sum(exp(x)) along ``dim`` (aten::softmax.int)."""
        return self._op("softmax.int", self, dim, *([] if dtype is None else [dtype]))

    def log_softmax(self, dim: int, dtype: Any = None) -> "DTensor":
        """torch.Tensor.log_softmax: log(softmax(x)) along ``dim``, stably
        (aten::log_softmax.int)."""
        return self._op("log_softmax.int", self, dim, *([] if dtype is None else [dtype]))

    # -- sorting ---------------------------------------------------------------------------------

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False
             ) -> return_types.sort:
        """torch.Tensor.sort: the values along ``dim`` in order and the index each came from,
        as a return_types.sort; always stable (equal values keep their order, NaN above every
        number) (aten::sort; ``stable=True``, aten::sort.stable)."""
        if stable:
            return return_types.sort(*self._op_outputs(
                "sort.stable", 2, self, stable=True, dim=dim, descending=descending))
        return return_types.sort(*self._op_outputs("sort", 2, self, dim, descending))

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False
                ) -> "DTensor":
        """torch.Tensor.argsort: the indices of sort (aten::sort)."""
        return self.sort(dim, descending, stable).indices

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
             ) -> return_types.topk:
        """torch.Tensor.topk: the ``k`` largest (``largest=False``: smallest) values along
        ``dim`` and their indices, as a return_types.topk, the lower index first among equals
        (aten::topk)."""
        return return_types.topk(*self._op_outputs("topk", 2, self, k, dim, largest, sorted))

    # -- matmul ----------------------------------------------------------------------------------

    def mm(self, mat2: "DTensor") -> "DTensor":
        """torch.Tensor.mm: 2-D by 2-D, with DTensor's matmul strategies (S(0)xR->S(0),
        RxS(1)->S(1), S(1)xS(0)->Partial(sum), RxR->R) (aten::mm)."""
        return self._op("mm", self, mat2)

    def matmul(self, other: "DTensor") -> "DTensor":
        """torch.Tensor.matmul: torch.matmul's broadcasting product (aten::matmul)."""
        return self._op("matmul", self, other)

    def bmm(self, mat2: "DTensor") -> "DTensor":
        """torch.Tensor.bmm: batched 3-D by 3-D (aten::bmm)."""
        return self._op("bmm", self, mat2)

    def addmm(self, mat1: "DTensor", mat2: "DTensor", *, beta: Any = 1, alpha: Any = 1
              ) -> "DTensor":
        """torch.Tensor.addmm: beta * self + alpha * (mat1 @ mat2) (aten::addmm)."""
        return self._op("addmm", self, mat1, mat2, **({} if beta == 1 else {"beta": beta}),
                        **({} if alpha == 1 else {"alpha": alpha}))
