"""Shard, Replicate and Partial: how a DTensor is laid out along each mesh dim, as in
``torch.distributed.tensor``. Shard uses torch.chunk's rule (chunk ``ceil(n/k)``, trailing ranks
possibly empty); Partial's ranks hold values whose reduction by ``reduce_op`` is the tensor."""

from __future__ import annotations

import re
from typing import Any, List, Sequence, Tuple, Union

from .errors import InvalidArgument

__all__ = ["Placement", "Shard", "Replicate", "Partial", "REDUCE_OPS", "as_placement",
           "as_placements", "chunk_bounds"]

#: Partial's reductions, by torch's names, and their tessera.v1.ReduceOp numbers.
REDUCE_OPS = {"sum": 1, "avg": 2, "max": 3, "min": 4, "product": 5}
_OP_NAMES = {v: k for k, v in REDUCE_OPS.items()}
_OP_ALIASES = {"prod": "product", "mean": "avg"}


class Placement:
    """A placement along one mesh dim."""

    def is_shard(self, dim: Union[int, None] = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False

    def to_json(self) -> str:
        """The spelling plan files take ("Shard(0)", "Replicate()", "Partial(sum)")."""
        raise NotImplementedError


class Shard(Placement):
    """Shard(dim): the tensor dim is split across the mesh dim by torch.chunk's rule."""

    __slots__ = ("dim",)

    def __init__(self, dim: int) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise InvalidArgument(f"Shard(dim) needs an integer dim, not {dim!r}")
        self.dim = dim

    def is_shard(self, dim: Union[int, None] = None) -> bool:
        return dim is None or dim == self.dim

    def to_json(self) -> str:
        return f"Shard({self.dim})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self) -> int:
        return hash(("Shard", self.dim))

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """Replicate(): every rank of the mesh dim holds the whole tensor."""

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def to_json(self) -> str:
        return "Replicate()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Replicate)

    def __hash__(self) -> int:
        return hash("Replicate")

    def __repr__(self) -> str:
        return "Replicate()"


class Partial(Placement):
    """Partial(reduce_op): the ranks hold values whose reduction is the tensor; reduce_op is one
    of "sum" (the default), "avg", "max", "min", "product"."""

    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op: str = "sum") -> None:
        op = _OP_ALIASES.get(str(reduce_op).lower(), str(reduce_op).lower())
        if op not in REDUCE_OPS:
            raise InvalidArgument(f"unknown reduce op '{reduce_op}'; expected one of "
                                  f"{', '.join(REDUCE_OPS)}")
        self.reduce_op = op

    def is_partial(self) -> bool:
        return True

    def to_json(self) -> str:
        return f"Partial({self.reduce_op})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self) -> int:
        return hash(("Partial", self.reduce_op))

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"


_TEXT = re.compile(r"^\s*(\w+)\s*(?:\((.*)\))?\s*$")


def as_placement(value: Any) -> Placement:
    """A Placement, or its spelling ("S(0)", "Shard(dim=0)", "R", "Replicate()", "P(sum)",
    'Partial("max")'), or a torch placement object, as a Placement."""
    if isinstance(value, Placement):
        return value
    if isinstance(value, str):
        m = _TEXT.match(value)
        if m:
            head, arg = m.group(1).lower(), (m.group(2) or "").strip()
            arg = re.sub(r"^\w+\s*=\s*", "", arg).strip("'\" ")
            if head in ("s", "shard") and re.fullmatch(r"-?\d+", arg):
                return Shard(int(arg))
            if head in ("r", "replicate") and not arg:
                return Replicate()
            if head in ("p", "partial"):
                return Partial(arg or "sum")
        raise InvalidArgument(f"placement '{value}' is not Shard(d), Replicate() or Partial(op)")
    cls = type(value).__name__  # torch.distributed.tensor placements
    if cls in ("Shard", "_StridedShard") and hasattr(value, "dim"):
        return Shard(int(value.dim))
    if cls == "Replicate":
        return Replicate()
    if cls in ("Partial", "_Partial", "_NormPartial") and hasattr(value, "reduce_op"):
        return Partial(str(value.reduce_op))
    raise InvalidArgument(f"{value!r} is not a placement")


def as_placements(values: Union[Sequence[Any], Any, None], ndim: int) -> List[Placement]:
    """One placement per mesh dim: ``values`` (None: all Replicate, as torch's default)."""
    if values is None:
        return [Replicate() for _ in range(ndim)]
    if isinstance(values, (Placement, str)) or not isinstance(values, (list, tuple)):
        values = [values]
    out = [as_placement(v) for v in values]
    if len(out) != ndim:
        raise InvalidArgument(f"{len(out)} placements {tuple(out)} for a mesh of {ndim} dims; "
                              "give one per mesh dim")
    return out


def chunk_bounds(n: int, k: int, i: int) -> Tuple[int, int]:
    """torch.chunk's piece ``i`` of ``n`` over ``k``: [begin, end), empty pieces at the end."""
    c = -(-n // k) if n else 0
    begin = min(n, i * c)
    return begin, min(n, begin + c)


def to_proto(placement: Placement, pb: Any) -> Any:
    """The tessera.v1.Placement message (``pb`` is the types_pb2 module)."""
    p = pb.Placement()
    if isinstance(placement, Shard):
        p.shard.dim = placement.dim
    elif isinstance(placement, Replicate):
        p.replicate.SetInParent()
    else:
        p.partial.op = REDUCE_OPS[placement.reduce_op]
    return p


def from_proto(p: Any) -> Placement:
    kind = p.WhichOneof("kind")
    if kind == "shard":
        return Shard(p.shard.dim)
    if kind == "replicate":
        return Replicate()
    if kind == "partial":
        return Partial(_OP_NAMES.get(p.partial.op or 1, "sum"))
    raise InvalidArgument(f"a placement message without a kind: {p}")
