"""An op call of the service's registry from Python values: ``OpCall.name`` and ``OpCall.args``
(tensor.proto), the way torch hands its IValues to an ATen op.

Positional arguments come first, then keyword arguments by their schema names. A DTensor is the
index of its input (each tensor is one input however often it appears); a list of DTensors (and
None) a ``Tensor[]``/``Tensor?[]``; a Python or numpy bool, int or float a scalar (a wrapped
number where the schema wants a Tensor); a list of ints (or a torch.Size) an ``int[]``; a dtype
(tessera's, numpy's, torch's, or ``bool``/``int``/``float``) a ``ScalarType``; a str a string;
None ``None``. This module only encodes: it never talks to the service."""

from __future__ import annotations

import builtins
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import dtypes as _dt
from .errors import InvalidArgument
from .transport import pb

__all__ = ["qualified_name", "encode_call", "is_dtype", "output_count"]


def qualified_name(name: str) -> str:
    """``name`` as the registry spells it: "softmax.int" is "aten::softmax.int"."""
    return name if "::" in name else f"aten::{name}"


def output_count(schema: str) -> Optional[int]:
    """How many tensors an op of torch schema ``schema`` returns: "-> Tensor" 1, "-> (Tensor
    values, Tensor indices)" 2; None for a list ("-> Tensor[]"), whose length the call
    decides."""
    if "->" not in schema:
        return 1
    returns = schema.rpartition("->")[2].strip()
    if "[]" in returns:
        return None
    if returns.startswith("("):
        return len([r for r in returns[1:-1].split(",") if r.strip()])
    return 1


def is_dtype(value: Any) -> bool:
    """Whether ``value`` names an element type rather than being a value."""
    if isinstance(value, (_dt.DType, np.dtype)):
        return True
    if isinstance(value, type):
        return issubclass(value, (np.generic, builtins.bool, builtins.int, builtins.float))
    kind = type(value)
    return kind.__module__ == "torch" and kind.__name__ == "dtype"


def _is_int(value: Any) -> bool:
    return isinstance(value, (builtins.int, np.integer)) and \
        not isinstance(value, (builtins.bool, np.bool_))


class _Encoder:
    """Encodes the arguments of one call, collecting its inputs."""

    def __init__(self, op: str, tensor_type: type) -> None:
        self.op = op
        self.tensor_type = tensor_type
        self.inputs: List[Any] = []
        self._index: Dict[str, int] = {}

    def input_index(self, tensor: Any) -> int:
        """The input index of ``tensor``, adding it the first time it appears."""
        name = tensor.name
        if name not in self._index:
            self._index[name] = len(self.inputs)
            self.inputs.append(tensor)
        return self._index[name]

    def argument(self, value: Any, where: str) -> Any:
        """The OpArgument of ``value``; ``where`` names it in errors ("argument 1", "dim")."""
        arg = pb.tensor.OpArgument()
        if value is None:
            arg.none = True
        elif isinstance(value, self.tensor_type):
            arg.tensor = self.input_index(value)
        elif isinstance(value, (builtins.bool, np.bool_)):
            arg.bool_value = builtins.bool(value)
        elif _is_int(value):
            arg.int_value = builtins.int(value)
        elif isinstance(value, (builtins.float, np.floating)):
            arg.float_value = builtins.float(value)
        elif isinstance(value, str):
            arg.string_value = value
        elif is_dtype(value):
            try:
                arg.dtype = _dt.as_dtype(value).number
            except ValueError as error:
                raise self.error(where, value, str(error)) from None
        elif isinstance(value, (list, tuple)):
            self._sequence(arg, value, where)
        elif isinstance(value, np.ndarray) and value.ndim == 0:
            return self.argument(value.item(), where)
        else:
            raise self.error(where, value, self._why_not(value))
        return arg

    def _sequence(self, arg: Any, values: Sequence[Any], where: str) -> None:
        """A list: DTensors (None among them: Tensor?[]), integers, or bools (a bool[N])."""
        if any(isinstance(v, self.tensor_type) for v in values) or \
                (values and all(v is None for v in values)):
            refs = []
            for v in values:
                if v is None:
                    refs.append(-1)
                elif isinstance(v, self.tensor_type):
                    refs.append(self.input_index(v))
                else:
                    raise self.error(where, values, "a list of tensors holds DTensors and None "
                                     f"only, not {type(v).__name__}")
            arg.tensors.SetInParent()
            arg.tensors.indices.extend(refs)
            return
        if values and all(isinstance(v, (builtins.bool, np.bool_)) for v in values):
            arg.ints.SetInParent()  # a bool[N] (output_mask) is sent as 0s and 1s
            arg.ints.values.extend(builtins.int(builtins.bool(v)) for v in values)
            return
        if not all(_is_int(v) for v in values):
            kinds = sorted({type(v).__name__ for v in values if not _is_int(v)})
            raise self.error(where, values, "a list is integers or DTensors, not "
                             f"{', '.join(kinds)}")
        arg.ints.SetInParent()
        arg.ints.values.extend(builtins.int(v) for v in values)

    def _why_not(self, value: Any) -> str:
        kind = type(value).__name__
        if type(value).__module__.startswith("torch") or isinstance(value, np.ndarray):
            return (f"a {type(value).__module__}.{kind} is not on the service: distribute it "
                    "first (tessera.distribute_tensor)")
        if isinstance(value, complex):
            return "the service holds no complex numbers"
        return f"a {kind} has no op argument form"

    def error(self, where: str, value: Any, why: str) -> InvalidArgument:
        text = repr(value)
        if len(text) > 60:
            text = text[:57] + "..."
        return InvalidArgument(f"{self.op}: {where} ({text}): {why}")


def encode_call(name: str, args: Sequence[Any], kwargs: Mapping[str, Any], tensor_type: type
                ) -> Tuple[Any, List[Any]]:
    """The OpCall of registry op ``name`` on ``args`` and ``kwargs``, and its inputs: every
    ``tensor_type`` value (a DTensor; anything with a ``name``) once, in order of first
    appearance. Raises InvalidArgument naming the op and the argument for a value with no
    wire form."""
    op = qualified_name(name)
    encoder = _Encoder(op, tensor_type)
    call = pb.tensor.OpCall(name=op)
    for i, value in enumerate(args):
        call.args.append(encoder.argument(value, f"argument {i}"))
    for key, value in kwargs.items():
        arg = encoder.argument(value, f"argument '{key}'")
        arg.name = key
        call.args.append(arg)
    return call, encoder.inputs
