"""DTensor.__torch_function__, torch's protocol for tensor-like types: a torch function called
on DTensors (``torch.softmax(x, -1)``, ``torch.cat([x, y])``, ``torch.nn.functional.relu(x)``,
``torch.Tensor.add(x, y)``) runs tessera's function or method of the same name, so its op on
the service. A torch function tessera has no name for raises UnsupportedOp naming it; types
other than DTensor's get NotImplemented, as the protocol asks."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from . import functions, nn_functional
from .dtensor import unsupported
from .errors import InvalidArgument

__all__ = ["torch_function", "resolve"]


def _method(name: str, owner: type) -> Callable[..., Any]:
    """torch.Tensor.<name>(self, ...) as the DTensor method."""
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, owner):
            raise InvalidArgument(f"torch.Tensor.{name} of a {type(self).__name__} and a "
                                  "DTensor: distribute the torch tensor first "
                                  "(tessera.distribute_tensor)")
        return getattr(self, name)(*args, **kwargs)

    return method


def resolve(func: Any, owner: type) -> Tuple[Optional[Callable[..., Any]], str]:
    """What runs torch's ``func`` on DTensors (``owner``), and func's torch name; None where
    tessera has no function of that name."""
    import torch

    name = getattr(func, "__name__", "")
    if name and getattr(torch.nn.functional, name, None) is func:
        found = getattr(nn_functional, name) if name in nn_functional.__all__ else None
        return found, f"torch.nn.functional.{name}"
    if name and getattr(torch.Tensor, name, None) is func:
        return (_method(name, owner) if hasattr(owner, name) else None), f"torch.Tensor.{name}"
    if name and getattr(torch, name, None) is func:
        return (getattr(functions, name) if name in functions.__all__ else None), f"torch.{name}"
    module = getattr(func, "__module__", None) or "torch"
    return None, f"{module}.{name or func!r}"


def torch_function(owner: type, func: Any, types: Sequence[type], args: Sequence[Any],
                   kwargs: Dict[str, Any]) -> Any:
    """DTensor.__torch_function__(func, types, args, kwargs)."""
    if not all(issubclass(t, owner) for t in types):
        return NotImplemented
    target, torch_name = resolve(func, owner)
    if target is None:
        raise unsupported(torch_name)
    return target(*args, **kwargs)
