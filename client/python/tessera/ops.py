"""Every op of the service's registry by its ATen name, as ``torch.ops.aten``:
``tessera.ops.aten.softmax.int(x, -1)``, ``tessera.ops.aten.softmax(x, -1)`` (the default
overload) or ``tessera.ops.call("aten::softmax.int", x, -1)``. Names resolve on the service, so
any registered op is callable without a client-side list; ``list_ops()`` (RPC ListOps) lists
them with their torch schemas, and ``dir(tessera.ops.aten)`` and an overload packet's
``overloads()`` read that list. Arguments follow the op's torch schema (op_args.py encodes
them); an unknown op raises Unimplemented naming it, a bad argument InvalidArgument naming it,
on the output's first touch (dtensor.py). An op whose schema returns several tensors
(``aten.max.dim``, ``aten.native_layer_norm``, ``aten.split.Tensor``) returns a tuple of them,
from one call: its schema, from the session's ListOps fetched once, says how many."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .dtensor import DTensor, _run, _run_outputs
from .errors import TesseraError
from .op_args import encode_call, output_count, qualified_name
from .session import Session, get_session

__all__ = ["OpInfo", "OpOverload", "OpOverloadPacket", "aten", "call", "call_outputs",
           "list_ops"]

Outputs = Union[DTensor, Tuple[DTensor, ...]]


@dataclass(frozen=True)
class OpInfo:
    """One op of the registry (ListOps): its name ("aten::softmax.int"), torch schema, family,
    sharding strategies, implementation and derivative, in words."""

    name: str
    schema: str
    family: str
    strategies: str
    implementation: str
    derivative: str

    def __str__(self) -> str:
        return self.schema or self.name


_listed: "weakref.WeakKeyDictionary[Session, Dict[str, OpInfo]]" = weakref.WeakKeyDictionary()


def list_ops(filter: str = "", session: Optional[Session] = None  # noqa: A002 - ListOps's
             ) -> Tuple[OpInfo, ...]:
    """The registry's ops whose name contains ``filter`` (empty: every op), by ListOps."""
    s = get_session(session)
    return tuple(OpInfo(o.name, o.schema, o.family, o.strategies, o.implementation, o.derivative)
                 for o in s.transport.list_ops(filter))


def _registry(session: Session) -> Dict[str, OpInfo]:
    """``session``'s registry by op name, fetched once; empty if ListOps fails."""
    if session not in _listed:
        try:
            _listed[session] = {o.name: o for o in list_ops(session=session)}
        except TesseraError:
            return {}
    return _listed[session]


def _known_ops() -> Tuple[OpInfo, ...]:
    """The default session's registry; empty without a session."""
    try:
        s = get_session(None)
    except TesseraError:
        return ()
    return tuple(_registry(s).values())


def _output_count(op: Any, inputs: Sequence[DTensor]) -> Optional[int]:
    """How many outputs OpCall ``op`` gives by its schema in its inputs' session's registry
    (None: a Tensor[]); 1 for an op the registry does not list."""
    if not inputs:
        return 1
    info = _registry(inputs[0].session).get(op.name)
    return 1 if info is None else output_count(info.schema)


def call(name: str, /, *args: Any, **kwargs: Any) -> Outputs:
    """Runs registry op ``name`` on ``args`` and ``kwargs`` as tessera.dtensor.call does: its
    DTensor, or the tuple of call_outputs for an op whose schema returns several tensors."""
    op, inputs = encode_call(name, args, kwargs, DTensor)
    count = _output_count(op, inputs)
    if count == 1:
        return _run(op, inputs)
    return _run_outputs(op, inputs, count)


def call_outputs(name: str, /, *args: Any, **kwargs: Any) -> Tuple[DTensor, ...]:
    """Runs registry op ``name`` as one call and returns every output in its schema's order:
    as many as the schema returns, or for a ``Tensor[]`` (split, chunk, unbind) as many as the
    service makes, the op stream then waiting for the answer. On the op stream the outputs
    share the call's answer: what the service refuses raises on each output's first touch."""
    op, inputs = encode_call(name, args, kwargs, DTensor)
    return _run_outputs(op, inputs, _output_count(op, inputs))


def _split(name: str) -> Tuple[str, str]:
    """("aten::softmax", "int") of "aten::softmax.int"; "" for the default overload."""
    base, _, overload = name.partition(".")
    return base, overload


class OpOverload:
    """One overload of a registry op ("aten::softmax.int"): calling it runs the op."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = qualified_name(name)

    def __call__(self, *args: Any, **kwargs: Any) -> Outputs:
        return call(self.name, *args, **kwargs)

    @property
    def schema(self) -> Optional[str]:
        """Its torch schema, from the default session's ListOps (None if not listed)."""
        info = next((o for o in _known_ops() if o.name == self.name), None)
        return info.schema if info is not None else None

    def __repr__(self) -> str:
        return f"tessera.ops.{self.name.replace('::', '.')}"


class OpOverloadPacket:
    """A registry op's overloads by name (``aten.add.Tensor``; ``.default`` and calling the
    packet are the default overload)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = qualified_name(name)

    def __getattr__(self, overload: str) -> OpOverload:
        if overload.startswith("__"):
            raise AttributeError(overload)
        return OpOverload(self.name if overload == "default" else f"{self.name}.{overload}")

    def __call__(self, *args: Any, **kwargs: Any) -> Outputs:
        return call(self.name, *args, **kwargs)

    def overloads(self) -> List[str]:
        """Its overloads' names in the default session's registry ("default" for the one
        without a name)."""
        out = []
        for o in _known_ops():
            base, overload = _split(o.name)
            if base == self.name:
                out.append(overload or "default")
        return out

    def __dir__(self) -> List[str]:
        return sorted(set(object.__dir__(self)) | set(self.overloads()))

    def __repr__(self) -> str:
        return f"tessera.ops.{self.name.replace('::', '.')}"


class _Namespace:
    """A namespace of registry ops (``aten``): every attribute is an op's overload packet."""

    __slots__ = ("namespace",)

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def __getattr__(self, name: str) -> OpOverloadPacket:
        if name.startswith("__"):
            raise AttributeError(name)
        return OpOverloadPacket(f"{self.namespace}::{name}")

    def __dir__(self) -> List[str]:
        prefix = f"{self.namespace}::"
        names = {_split(o.name)[0][len(prefix):] for o in _known_ops()
                 if o.name.startswith(prefix)}
        return sorted(set(object.__dir__(self)) | names)

    def __repr__(self) -> str:
        return f"tessera.ops.{self.namespace}"


#: ATen's ops on the service: ``aten.<name>.<overload>(...)`` or ``aten.<name>(...)``.
aten = _Namespace("aten")
