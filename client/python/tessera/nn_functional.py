"""torch.nn.functional's activations, softmax, linear, norms, embedding and attention on DTensors,
with its signatures;
``tessera.nn.functional`` (nn.py) is this module."""

from __future__ import annotations

import threading
import warnings
from typing import Any, Optional

import numpy as np

from .dtensor import DTensor, call
from .errors import InvalidArgument, Unimplemented

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "linear",
           "layer_norm", "rms_norm", "embedding", "scaled_dot_product_attention",
           "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "dropout"]


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


def _shape(normalized_shape: Any) -> list:
    return [int(normalized_shape)] if isinstance(normalized_shape, int) else \
        [int(n) for n in normalized_shape]


def layer_norm(input: DTensor, normalized_shape: Any, weight: Optional[DTensor] = None,
               bias: Optional[DTensor] = None, eps: float = 1e-5) -> DTensor:
    """F.layer_norm over the last ``len(normalized_shape)`` dims (aten::layer_norm)."""
    return call("layer_norm", _dtensor(input, "layer_norm"), _shape(normalized_shape), weight,
                bias, eps)


def rms_norm(input: DTensor, normalized_shape: Any, weight: Optional[DTensor] = None,
             eps: Optional[float] = None) -> DTensor:
    """F.rms_norm: x / sqrt(mean(x^2) + eps) * weight; ``eps=None`` is the epsilon of the
    compute dtype, as torch's (aten::rms_norm)."""
    return call("rms_norm", _dtensor(input, "rms_norm"), _shape(normalized_shape), weight, eps)


def embedding(input: DTensor, weight: DTensor, padding_idx: Optional[int] = None,
              max_norm: Optional[float] = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> DTensor:
    """F.embedding: the rows of ``weight`` at the integer ``input`` (aten::embedding); a
    vocab-sharded weight (Shard(0)) gives a Partial(sum) result, rows outside a rank's shard
    zero there."""
    if max_norm is not None:
        raise Unimplemented("embedding(max_norm=...) renormalizes the weight in place; DTensors "
                            "on the service are not changed in place")
    _dtensor(input, "embedding")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return call("embedding", _dtensor(weight, "embedding"), input,
                -1 if padding_idx is None else padding_idx, scale_grad_by_freq, sparse)


def scaled_dot_product_attention(query: DTensor, key: DTensor, value: DTensor,
                                 attn_mask: Optional[DTensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> DTensor:
    """F.scaled_dot_product_attention: softmax(q k^T * scale + mask) v over the last two dims,
    heads sharded alike on query, key and value (aten::scaled_dot_product_attention)."""
    kwargs: dict = {}
    if scale is not None:
        kwargs["scale"] = scale
    if enable_gqa:
        kwargs["enable_gqa"] = True
    return call("scaled_dot_product_attention", _dtensor(query, "scaled_dot_product_attention"),
                key, value, attn_mask, dropout_p, is_causal, **kwargs)


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
_loss_parallel = threading.local()


def _reduction(reduction: str, size_average: Any, reduce: Any, name: str) -> int:
    if size_average is not None or reduce is not None:  # torch's legacy arguments
        reduction = "none" if reduce is False else ("sum" if size_average is False else "mean")
    if reduction not in _REDUCTIONS:
        raise InvalidArgument(f"{name}: reduction is 'none', 'mean' or 'sum', not {reduction!r}")
    return _REDUCTIONS[reduction]


def _target(input: DTensor, target: Any) -> DTensor:
    """The target as a DTensor: class indices (int64) or values, Replicate on input's mesh."""
    if isinstance(target, DTensor):
        return target
    array = np.asarray(target)
    if np.issubdtype(array.dtype, np.integer):
        array = array.astype(np.int64)
    return input._replicated(array)


def cross_entropy(input: DTensor, target: Any, weight: Optional[DTensor] = None,
                  size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> DTensor:
    """F.cross_entropy of logits (classes at dim 1, or dim 0 for one sample) and class indices
    (int64) or class probabilities (aten::cross_entropy_loss, which runs as log_softmax and
    nll_loss). Logits sharded by class stay sharded: the loss is a Partial(sum) whose rows'
    maxima and sums of exps are reduced across ranks, never the logits gathered (DTensor's
    loss_parallel)."""
    x = _dtensor(input, "cross_entropy")
    if getattr(_loss_parallel, "active", False):
        cdim = 0 if x.ndim == 1 else 1
        if not any(p.is_shard(cdim) or p.is_shard(cdim - x.ndim) for p in x.placements):
            raise InvalidArgument(f"loss_parallel: cross_entropy's input must be sharded on its "
                                  f"class dim {cdim}, not {list(x.placements)}")
    return call("cross_entropy_loss", x, _target(x, target), weight,
                _reduction(reduction, size_average, reduce, "cross_entropy"), ignore_index,
                label_smoothing)


def nll_loss(input: DTensor, target: Any, weight: Optional[DTensor] = None,
             size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
             reduction: str = "mean") -> DTensor:
    """F.nll_loss of log-probabilities and int64 class indices (aten::nll_loss)."""
    x = _dtensor(input, "nll_loss")
    return call("nll_loss", x, _target(x, target), weight,
                _reduction(reduction, size_average, reduce, "nll_loss"), ignore_index)


def mse_loss(input: DTensor, target: Any, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> DTensor:
    """F.mse_loss: the (mean or summed) squared difference (aten::mse_loss)."""
    x = _dtensor(input, "mse_loss")
    return call("mse_loss", x, _target(x, target),
                _reduction(reduction, size_average, reduce, "mse_loss"))


def l1_loss(input: DTensor, target: Any, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> DTensor:
    """F.l1_loss: the (mean or summed) absolute difference (aten::l1_loss)."""
    x = _dtensor(input, "l1_loss")
    return call("l1_loss", x, _target(x, target),
                _reduction(reduction, size_average, reduce, "l1_loss"))
def dropout(input: DTensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> DTensor:
    """torch.nn.functional.dropout (aten::dropout): each element kept with probability 1 - p and
    scaled by 1 / (1 - p), its mask drawn from the session's random stream at the element's
    global index, so every layout drops the same elements."""
    _not_inplace(inplace, "dropout")
    return call("dropout", _dtensor(input, "dropout"), float(p), bool(training))
