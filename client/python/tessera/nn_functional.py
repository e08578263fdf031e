"""torch.nn.functional's activations, softmax and linear on DTensors, with its signatures;
``tessera.nn.functional`` (nn.py) is this module."""

from __future__ import annotations

import warnings
from typing import Any, Optional

from .dtensor import DTensor, call
from .errors import InvalidArgument, Unimplemented

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "linear",
           "dropout"]


def _dtensor(input: Any, name: str) -> DTensor:
    if not isinstance(input, DTensor):
        raise InvalidArgument(f"tessera.nn.functional.{name} takes a DTensor, not "
                              f"{type(input).__name__}")
    return input


def _not_inplace(inplace: bool, name: str) -> None:
    if inplace:
        raise Unimplemented(f"{name}(inplace=True): DTensors on the service are not changed in "
                            "place")


def relu(input: DTensor, inplace: bool = False) -> DTensor:
    """F.relu: max(x, 0) (aten::relu)."""
    _not_inplace(inplace, "relu")
    return _dtensor(input, "relu").relu()


def gelu(input: DTensor, approximate: str = "none") -> DTensor:
    """F.gelu: x * Phi(x), the exact erf form or ``approximate="tanh"`` (aten::gelu)."""
    return _dtensor(input, "gelu").gelu(approximate)


def silu(input: DTensor, inplace: bool = False) -> DTensor:
    """F.silu: x * sigmoid(x) (aten::silu)."""
    _not_inplace(inplace, "silu")
    return call("silu", _dtensor(input, "silu"))


def sigmoid(input: DTensor) -> DTensor:
    """F.sigmoid (aten::sigmoid)."""
    return _dtensor(input, "sigmoid").sigmoid()


def tanh(input: DTensor) -> DTensor:
    """F.tanh (aten::tanh)."""
    return _dtensor(input, "tanh").tanh()


def _softmax_dim(input: DTensor, dim: Optional[int], name: str) -> int:
    """``dim``, or torch's implicit choice (0 for 0-, 1- and 3-D, else 1), with its warning."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=3)
    return 0 if input.ndim in (0, 1, 3) else 1


def softmax(input: DTensor, dim: Optional[int] = None, _stacklevel: int = 3,
            dtype: Any = None) -> DTensor:
    """F.softmax along ``dim`` (aten::softmax.int)."""
    x = _dtensor(input, "softmax")
    return x.softmax(_softmax_dim(x, dim, "softmax"), dtype)


def log_softmax(input: DTensor, dim: Optional[int] = None, _stacklevel: int = 3,
                dtype: Any = None) -> DTensor:
    """F.log_softmax along ``dim`` (aten::log_softmax.int)."""
    x = _dtensor(input, "log_softmax")
    return x.log_softmax(_softmax_dim(x, dim, "log_softmax"), dtype)


def linear(input: DTensor, weight: DTensor, bias: Optional[DTensor] = None) -> DTensor:
    """F.linear: input @ weight.T + bias (aten::linear)."""
    return call("linear", _dtensor(input, "linear"), weight, bias)


def dropout(input: DTensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> DTensor:
    """torch.nn.functional.dropout (aten::dropout): each element kept with probability 1 - p and
    scaled by 1 / (1 - p), its mask drawn from the session's random stream at the element's
    global index, so every layout drops the same elements."""
    _not_inplace(inplace, "dropout")
    return call("dropout", _dtensor(input, "dropout"), float(p), bool(training))
