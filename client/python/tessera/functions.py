"""torch's functions on DTensors: ``tessera.exp(x)``, ``tessera.cat([x, y])``,
``tessera.where(c, x, y)``... with torch's signatures. Where torch's function is its Tensor
method with the tensor first (``torch.sum(x, 1)`` is ``x.sum(1)``), it is that method
(tensor_math.py, tensor_shape.py); cat, stack, where, var_mean, std_mean and the ``*_like``
factories are ops of their own. ``max``/``min`` along a dim, ``sort`` and ``topk`` return torch's
named tuples (return_types.py), ``var_mean`` and ``std_mean`` a (var, mean) tuple."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple

from .dtensor import DTensor, call
from .errors import InvalidArgument, Unimplemented
from .tensor_math import is_number, moment_args

__all__ = [
    # pointwise
    "neg", "negative", "abs", "absolute", "sign", "exp", "expm1", "log", "log1p", "log2", "sqrt",
    "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "gelu", "erf", "floor", "ceil",
    "round", "trunc", "fix", "square", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite",
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
    "remainder", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "not_equal",
    "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "where", "masked_fill", "clamp",
    "clip", "clamp_min", "clamp_max",
    # reductions
    "sum", "mean", "amax", "amin", "max", "min", "prod", "any", "all", "argmax", "argmin", "var",
    "std", "var_mean", "std_mean", "logsumexp", "cumsum", "cumprod", "softmax", "log_softmax",
    # sorting
    "sort", "argsort", "topk",
    # matmul
    "mm", "matmul", "bmm", "addmm",
    # views and pieces
    "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose",
    "swapaxes", "swapdims", "t", "clone", "detach", "select", "narrow", "index_select", "tril",
    "triu", "chunk", "split", "unbind", "cat", "concat", "concatenate", "stack",
    # indexing
    "gather", "scatter", "scatter_add", "index_put", "norm",
    # factories
    "zeros_like", "ones_like", "full_like",
]


def _dtensor(input: Any, name: str) -> DTensor:
    if not isinstance(input, DTensor):
        raise InvalidArgument(f"tessera.{name} takes a DTensor, not {type(input).__name__}")
    return input


def _method(name: str) -> Callable[..., Any]:
    """torch.<name>(input, ...) as ``input.<name>(...)``."""
    def function(input: DTensor, *args: Any, **kwargs: Any) -> Any:
        return getattr(_dtensor(input, name), name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name}(input, ...): input.{name}(...). " + \
        (getattr(DTensor, name).__doc__ or "")
    return function


neg = _method("neg")
negative = _method("negative")
abs = _method("abs")
absolute = _method("absolute")
sign = _method("sign")
exp = _method("exp")
expm1 = _method("expm1")
log = _method("log")
log1p = _method("log1p")
log2 = _method("log2")
sqrt = _method("sqrt")
rsqrt = _method("rsqrt")
reciprocal = _method("reciprocal")
sin = _method("sin")
cos = _method("cos")
tanh = _method("tanh")
sigmoid = _method("sigmoid")
relu = _method("relu")
gelu = _method("gelu")
erf = _method("erf")
floor = _method("floor")
ceil = _method("ceil")
round = _method("round")
trunc = _method("trunc")
fix = _method("fix")
square = _method("square")
logical_not = _method("logical_not")
bitwise_not = _method("bitwise_not")
isnan = _method("isnan")
isinf = _method("isinf")
isfinite = _method("isfinite")
add = _method("add")
sub = _method("sub")
subtract = _method("subtract")
mul = _method("mul")
multiply = _method("multiply")
div = _method("div")
divide = _method("divide")
true_divide = _method("true_divide")
floor_divide = _method("floor_divide")
remainder = _method("remainder")
maximum = _method("maximum")
minimum = _method("minimum")
eq = _method("eq")
ne = _method("ne")
lt = _method("lt")
le = _method("le")
gt = _method("gt")
ge = _method("ge")
not_equal = _method("not_equal")
less = _method("less")
less_equal = _method("less_equal")
greater = _method("greater")
greater_equal = _method("greater_equal")
logical_and = _method("logical_and")
logical_or = _method("logical_or")
logical_xor = _method("logical_xor")
bitwise_and = _method("bitwise_and")
bitwise_or = _method("bitwise_or")
bitwise_xor = _method("bitwise_xor")
masked_fill = _method("masked_fill")
clamp = _method("clamp")
clip = _method("clip")
clamp_min = _method("clamp_min")
clamp_max = _method("clamp_max")

sum = _method("sum")
mean = _method("mean")
amax = _method("amax")
amin = _method("amin")
max = _method("max")
min = _method("min")
prod = _method("prod")
any = _method("any")
all = _method("all")
argmax = _method("argmax")
argmin = _method("argmin")
var = _method("var")
std = _method("std")
logsumexp = _method("logsumexp")
cumsum = _method("cumsum")
cumprod = _method("cumprod")
softmax = _method("softmax")
log_softmax = _method("log_softmax")

sort = _method("sort")
argsort = _method("argsort")
topk = _method("topk")

mm = _method("mm")
matmul = _method("matmul")
bmm = _method("bmm")
addmm = _method("addmm")

reshape = _method("reshape")
flatten = _method("flatten")
unflatten = _method("unflatten")
unsqueeze = _method("unsqueeze")
squeeze = _method("squeeze")
permute = _method("permute")
transpose = _method("transpose")
swapaxes = _method("swapaxes")
swapdims = _method("swapdims")
t = _method("t")
clone = _method("clone")
detach = _method("detach")
select = _method("select")
narrow = _method("narrow")
index_select = _method("index_select")
tril = _method("tril")
triu = _method("triu")
chunk = _method("chunk")
split = _method("split")
unbind = _method("unbind")
gather = _method("gather")
scatter = _method("scatter")
scatter_add = _method("scatter_add")
index_put = _method("index_put")
norm = _method("norm")

_pow = _method("pow")


def pow(input: Any, exponent: Any) -> DTensor:  # noqa: A001 - torch's name
    """torch.pow: input ** exponent, ``input`` a DTensor or a number (a wrapped number)."""
    if is_number(input) and isinstance(exponent, DTensor):
        return call("pow.Tensor_Tensor", input, exponent)
    return _pow(input, exponent)


def where(condition: DTensor, input: Any = None, other: Any = None) -> DTensor:
    """torch.where(condition, input, other): ``input`` where ``condition``, else ``other``;
    either may be a number (aten::where.self)."""
    if input is None and other is None:
        raise Unimplemented("torch.where(condition) (the indices of non-zeros) is not an op of "
                            "the service")
    return call("where.self", condition, input, other)


def cat(tensors: Sequence[DTensor], dim: int = 0) -> DTensor:
    """torch.cat: ``tensors`` joined along ``dim`` (aten::cat)."""
    return call("cat", list(tensors), dim)


concat = concatenate = cat


def stack(tensors: Sequence[DTensor], dim: int = 0) -> DTensor:
    """torch.stack: ``tensors`` joined along a new dim ``dim`` (aten::stack)."""
    return call("stack", list(tensors), dim)


def zeros_like(input: DTensor, *, dtype: Any = None) -> DTensor:
    """torch.zeros_like: zeros of input's shape, placements and (unless ``dtype``) dtype
    (aten::zeros_like)."""
    return call("zeros_like", input, **({} if dtype is None else {"dtype": dtype}))


def ones_like(input: DTensor, *, dtype: Any = None) -> DTensor:
    """torch.ones_like (aten::ones_like)."""
    return call("ones_like", input, **({} if dtype is None else {"dtype": dtype}))


def full_like(input: DTensor, fill_value: Any, *, dtype: Any = None) -> DTensor:
    """torch.full_like: ``fill_value`` everywhere (aten::full_like)."""
    return call("full_like", input, fill_value, **({} if dtype is None else {"dtype": dtype}))


def _moment_mean(name: str, input: DTensor, dim: Any, unbiased: Optional[bool], keepdim: bool,
                 correction: Any) -> Tuple[DTensor, DTensor]:
    """torch.<name> (var_mean or std_mean) as one call of aten::<name>.correction."""
    x = _dtensor(input, name)
    dims, correction = moment_args(name, dim, unbiased, correction)
    return tuple(x._op_outputs(f"{name}.correction", 2, x, dims, correction=correction,
                               keepdim=keepdim))  # type: ignore[return-value]


def var_mean(input: DTensor, dim: Any = None, unbiased: Optional[bool] = None,
             keepdim: bool = False, *, correction: Any = None) -> Tuple[DTensor, DTensor]:
    """torch.var_mean: (var, mean) over ``dim`` (None: every dim) with ``correction`` (1 by
    default; ``unbiased=False`` is 0), as ``var_mean(input, dim, unbiased, keepdim)`` or
    ``var_mean(input, unbiased)`` too; one call of aten::var_mean.correction."""
    return _moment_mean("var_mean", input, dim, unbiased, keepdim, correction)


def std_mean(input: DTensor, dim: Any = None, unbiased: Optional[bool] = None,
             keepdim: bool = False, *, correction: Any = None) -> Tuple[DTensor, DTensor]:
    """torch.std_mean: (std, mean), as var_mean (aten::std_mean.correction)."""
    return _moment_mean("std_mean", input, dim, unbiased, keepdim, correction)
