"""DTensor on the service, with ``torch.distributed.tensor``'s names.

A :class:`DTensor` is a handle to a tensor the coordinator holds, sharded over a mesh's workers:
its metadata (shape, dtype, placements, every rank's shard) is local, its data stays on the
workers. Ops, factories and redistributes return as soon as the coordinator has planned them; the
workers run them in order afterwards, and a failure surfaces on the next call that reads the
tensor (``full_tensor``, ``to_local``, ``wait``). Dropping the last reference to a handle frees
the remote tensor. Every call goes through ``session.transport`` (transport.py).

On the session's op stream (the default), an op does not wait for the coordinator at all: it
names its output, queues the op and returns the handle at once; the output's metadata (shape,
dtype, placements, shards, ``redistributions``, ``state``) comes from the op's answer on first
access. What the coordinator refuses (shapes or dtypes that do not fit, an input freed through
another handle, a taken name) therefore raises on the output's first touch -- a metadata
access, ``full_tensor``, ``to_local``, ``wait``, ``redistribute``, ``refresh``, ``free``, or an
op on it once the refusal is known -- with the exception class and message RunOp would have
given, prefixed by "the op that makes '<output>' failed: ". Frees go on the same stream, so a
handle dropped right after an op that reads it never frees the tensor under the op."""

from __future__ import annotations

import random
import threading
import weakref
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import dtypes as _dt
from .errors import DataLoss, InvalidArgument, TesseraError, Unimplemented, UnsupportedOp
from .interop import HostBuffer, as_buffer, wrap_output
from .mesh import DeviceMesh
from .op_args import encode_call
from .placements import Placement, Replicate, as_placements, from_proto, to_proto
from .progress import ProgressArg
from .session import Session
from .op_stream import Outcome
from .tensor_math import TensorMath
from .tensor_shape import TensorShape, size_arg
from .transport import pb

__all__ = [
    "DTensor", "RedistributeStep", "RedistributePlan", "InputRedistribution", "distribute_tensor",
    "zeros", "ones", "full", "empty", "rand", "randn", "manual_seed", "get_tensor", "call",
]

_ShapeArg = Union[int, Sequence[int]]

#: torch names (functions and Tensor methods) that neither the service's op registry nor this
#: client's decompositions run: using them raises UnsupportedOp, naming what runs.
TORCH_ONLY = frozenset("""
    softplus repeat tile flip roll take masked_select nonzero unique
    kthvalue median mode dist einsum outer kron cross diag diagonal trace
    baddbmm addcmul addcdiv lerp log10 exp2 tan asin acos atan atan2 sinh cosh fmod hypot
    dropout backward requires_grad_ cuda item tolist
""".split())
SUPPORTED_OPS = ("the ops of its registry (tessera.ops.list_ops(); tessera.ops.aten.<name> calls "
                 "any of them): pointwise math, comparisons and logic, reductions (sum, mean, "
                 "amax/amin, prod, any/all, argmax/argmin, var/std, logsumexp, cumsum/cumprod, "
                 "max/min along a dim with their indices, var_mean/std_mean), sort, argsort, "
                 "topk, softmax and log_softmax, mm/matmul/addmm/bmm/linear, views (view, reshape, "
                 "flatten, unflatten, squeeze, unsqueeze, permute, transpose, expand), cat, stack, "
                 "basic and advanced indexing, chunk/split/unbind, narrow, index_select, gather, "
                 "scatter/scatter_add, index_put, tril/triu, norms (norm, layer_norm, rms_norm), "
                 "embedding, scaled_dot_product_attention, casts (to) and the *_like factories")


def unsupported(name: str) -> UnsupportedOp:
    """The error of torch name ``name`` ("tessera.sort", "DTensor.sort") that nothing runs."""
    return UnsupportedOp(f"'{name}' is not an op of the service: it runs {SUPPORTED_OPS}; "
                         "for others, full_tensor() or to_local(rank) and compute locally")


@dataclass(frozen=True)
class RedistributeStep:
    """One step of a redistribute: one mesh dim's placement changes by one collective."""

    mesh_dim: int
    from_placement: Placement
    to_placement: Placement
    collective: str  # "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "local_chunk"...
    reduce_op: Optional[str]
    send_bytes: int
    recv_bytes: int

    def __str__(self) -> str:
        op = f"({self.reduce_op})" if self.reduce_op else ""
        return (f"mesh dim {self.mesh_dim}: {self.from_placement} -> {self.to_placement} "
                f"{self.collective}{op}, send {self.send_bytes} B, recv {self.recv_bytes} B")


@dataclass(frozen=True)
class RedistributePlan:
    """The collectives a redistribute runs, in order."""

    steps: Tuple[RedistributeStep, ...]
    total_send_bytes: int
    total_recv_bytes: int

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.steps) or "no steps"

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class InputRedistribution:
    """An op's implicit redistribution of one input (never hidden)."""

    input: str
    from_placements: Tuple[Placement, ...]
    to_placements: Tuple[Placement, ...]
    plan: RedistributePlan


_REDUCE_NAMES = {1: "sum", 2: "avg", 3: "max", 4: "min", 5: "product"}


def _plan_from_proto(p: Any) -> RedistributePlan:
    steps = tuple(
        RedistributeStep(s.mesh_dim, from_proto(s.from_placement), from_proto(s.to_placement),
                         pb.types.Collective.Name(s.collective).lower(),
                         _REDUCE_NAMES.get(s.reduce_op), s.send_bytes, s.recv_bytes)
        for s in p.steps)
    return RedistributePlan(steps, p.total_send_bytes, p.total_recv_bytes)


def _layout(device_mesh: Optional[DeviceMesh], placements: Any) -> Tuple[DeviceMesh, List[Any]]:
    """The whole mesh and one placement message per its dims: ``placements`` on a view go to the
    view's dims, Replicate on the others."""
    if device_mesh is None:
        raise InvalidArgument("a device_mesh is needed (tessera.init_device_mesh or "
                              "tessera.get_device_mesh)")
    if not isinstance(device_mesh, DeviceMesh):
        raise InvalidArgument(f"device_mesh must be a tessera.DeviceMesh, not {device_mesh!r}")
    ps = as_placements(placements, device_mesh.ndim)
    root = device_mesh.root_mesh
    full: List[Placement] = [Replicate() for _ in range(root.ndim)]
    for i, d in enumerate(device_mesh.dims):
        full[d] = ps[i]
    return root, [to_proto(p, pb.types) for p in full]


class DTensor(TensorMath, TensorShape):
    """A handle to a DTensor held by the service (see the module's docstring), with
    torch.Tensor's methods (tensor_math.py, tensor_shape.py)."""

    __slots__ = ("_session", "_name", "_mesh", "_shape", "_dtype", "_placements", "_shards",
                 "_nbytes", "_owner", "_state", "_error", "_kind", "_finalizer", "_made",
                 "_redistributions", "_index", "plan", "relayed_bytes", "__weakref__")

    def __init__(self) -> None:  # handles come from the factories, ops and from_local
        raise TypeError("make DTensors with tessera.distribute_tensor, DTensor.from_local, the "
                        "factories or ops")

    @classmethod
    def _adopt(cls, session: Session, info: Any, mesh: Optional[DeviceMesh], owned: bool = True,
               kind: str = "numpy") -> "DTensor":
        self = object.__new__(cls)
        self._session = session
        self._name = info.name
        if mesh is None or mesh.name != info.mesh:
            spec = info.meta.mesh
            mesh = DeviceMesh(session, info.mesh, spec.device_type, list(spec.shape),
                              list(spec.dim_names) or None,
                              list(spec.ranks) or range(int(np.prod(list(spec.shape)))))
        self._mesh = mesh.root_mesh
        self._kind = kind
        self._made: Optional[Outcome] = None
        self._index: Optional[int] = None
        self._redistributions: Tuple[InputRedistribution, ...] = ()
        self.plan: Optional[RedistributePlan] = None
        self.relayed_bytes = 0
        self._finalizer = weakref.finalize(self, session.transport.free_tensor_later, info.name) \
            if owned else None
        self._update(info)
        return self

    @classmethod
    def _on_stream(cls, session: Session, name: str, mesh: DeviceMesh, kind: str,
                   made: Outcome, index: Optional[int] = None) -> "DTensor":
        """The output of an op sent on the op stream: its metadata comes from ``made``; output
        ``index`` of an op with several outputs (its reply's ``outputs``), else its only one."""
        self = object.__new__(cls)
        self._session = session
        self._name = name
        self._mesh = mesh
        self._kind = kind
        self._made = made
        self._index = index
        self._redistributions = ()
        self.plan = None
        self.relayed_bytes = 0
        self._finalizer = weakref.finalize(self, session.transport.free_tensor_later, name, made)
        return self

    def _settled(self) -> "DTensor":
        """This handle once the op that makes it is answered: its metadata filled in, or that
        op's error raised (with its code, naming this tensor)."""
        made = self._made
        if made is None:
            return self
        self._session.transport.await_outcome(made, f"the op that makes '{self._name}'")
        error = made.error()
        if error is not None:
            raise type(error)(f"the op that makes '{self._name}' failed: {error.message}",
                              error.code)
        reply = made.reply
        if self._index is None:
            self._update(reply.output)
            _free_other_outputs(self._session, reply)
        else:
            infos = reply.outputs or [reply.output]
            if self._index >= len(infos):
                raise DataLoss(f"the op that makes '{self._name}' answered {len(infos)} "
                               f"outputs, not its output {self._index}")
            self._update(infos[self._index])
        self._redistributions = _redistributions_from_proto(reply)
        self._made = None
        if self._index is None:
            made.reply = None  # the answer's message is not kept alive by the handle's finalizer
        return self

    def _update(self, info: Any) -> None:
        meta = info.meta
        self._shape = tuple(int(d) for d in meta.shape.dims)
        self._dtype = _dt.from_number(meta.dtype)
        self._placements = tuple(from_proto(p) for p in meta.placements)
        self._shards = tuple((tuple(s.local_shape), tuple(s.global_offset)) for s in meta.shards)
        self._nbytes = int(meta.nbytes)
        self._owner = info.owner
        self._state = pb.tensor.TensorState.Name(info.state).lower()
        self._error = info.error

    # -- metadata --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The tensor's name on the coordinator."""
        return self._name

    @property
    def shape(self) -> Tuple[int, ...]:
        """The global shape."""
        return self._settled()._shape

    def size(self, dim: Optional[int] = None) -> Union[int, Tuple[int, ...]]:
        shape = self._settled()._shape
        return shape if dim is None else shape[dim]

    @property
    def ndim(self) -> int:
        return len(self._settled()._shape)

    def dim(self) -> int:
        return len(self._settled()._shape)

    def numel(self) -> int:
        return int(np.prod(self._settled()._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self._settled()._nbytes

    @property
    def dtype(self) -> _dt.DType:
        return self._settled()._dtype

    @property
    def placements(self) -> Tuple[Placement, ...]:
        """One placement per dim of the (whole) mesh."""
        return self._settled()._placements

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._mesh

    @property
    def local_shapes(self) -> Tuple[Tuple[int, ...], ...]:
        """Every rank's local shape, in the mesh's row-major rank order."""
        return tuple(s[0] for s in self._settled()._shards)

    @property
    def local_offsets(self) -> Tuple[Tuple[int, ...], ...]:
        """Every rank's global offset."""
        return tuple(s[1] for s in self._settled()._shards)

    @property
    def owner(self) -> str:
        return self._settled()._owner

    @property
    def state(self) -> str:
        """"ready", "pending" or "failed", as of the last reply (``refresh`` asks again)."""
        return self._settled()._state

    @property
    def error(self) -> str:
        return self._settled()._error

    @property
    def redistributions(self) -> Tuple[InputRedistribution, ...]:
        """An op's output: the implicit redistributions of its inputs that the op ran."""
        return self._settled()._redistributions

    @property
    def session(self) -> Session:
        return self._session

    def __repr__(self) -> str:
        try:
            self._settled()
        except TesseraError as e:
            return f"DTensor(name='{self._name}', mesh='{self._mesh.name}', failed: {e})"
        return (f"DTensor(name='{self._name}', shape={self._shape}, dtype={self._dtype.name}, "
                f"placements={self._placements}, mesh='{self._mesh.name}')")

    def __len__(self) -> int:
        shape = self._settled()._shape
        if not shape:
            raise TypeError("len() of a 0-d DTensor")
        return shape[0]

    # -- data ------------------------------------------------------------------------------------

    def new_zeros(self, *size: Any, dtype: Any = None,
                  placements: Optional[Sequence[Any]] = None) -> "DTensor":
        """torch.Tensor.new_zeros on this DTensor's mesh (Replicate unless ``placements``)."""
        return _new_factory("new_zeros", self, size, dtype, placements)

    def new_ones(self, *size: Any, dtype: Any = None,
                 placements: Optional[Sequence[Any]] = None) -> "DTensor":
        """torch.Tensor.new_ones."""
        return _new_factory("new_ones", self, size, dtype, placements)

    def new_empty(self, *size: Any, dtype: Any = None,
                  placements: Optional[Sequence[Any]] = None) -> "DTensor":
        """torch.Tensor.new_empty (zeros)."""
        return _new_factory("new_empty", self, size, dtype, placements)

    def new_full(self, size: Any, fill_value: Any, *, dtype: Any = None,
                 placements: Optional[Sequence[Any]] = None) -> "DTensor":
        """torch.Tensor.new_full."""
        return _new_factory("new_full", self, (size,), dtype, placements, fill_value)

    def full_tensor(self, *, kind: Optional[str] = None, progress: ProgressArg = None) -> Any:
        """The whole tensor (Partial dims reduced), streamed back: a numpy array, or a torch
        tensor when the DTensor was made from one (``kind`` "numpy" or "torch" chooses)."""
        self._settled()
        dtype, array = self._session.transport.full_tensor(self._name, progress)
        return wrap_output(array, dtype, kind or self._kind)

    def to_local(self, rank: Optional[int] = None, *, kind: Optional[str] = None) -> Any:
        """Rank ``rank``'s local tensor (row-major mesh position). One process holds every
        rank here, so the rank is needed unless the mesh has one rank."""
        if rank is None:
            if self._mesh.size() != 1:
                raise InvalidArgument(f"to_local of '{self._name}': pass the rank (0..."
                                      f"{self._mesh.size() - 1}); local_tensors() gives them all")
            rank = 0
        self._settled()
        dtype, array = self._session.transport.to_local(self._name, int(rank))
        return wrap_output(array, dtype, kind or self._kind)

    def local_tensors(self, *, kind: Optional[str] = None) -> List[Any]:
        """Every rank's local tensor, in the mesh's row-major rank order."""
        return [self.to_local(r, kind=kind) for r in range(self._mesh.size())]

    def numpy(self) -> np.ndarray:
        """full_tensor() as a numpy array."""
        return self.full_tensor(kind="numpy")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def redistribute(self, device_mesh: Optional[DeviceMesh] = None,
                     placements: Optional[Sequence[Any]] = None, *, async_op: bool = False,
                     planner: str = "min_cost", name: str = "") -> "DTensor":
        """DTensor.redistribute(device_mesh, placements): on its mesh by real collectives, or to
        another mesh (streamed through the coordinator). The result's ``plan`` holds the
        collectives that ran. It returns once planned (``async_op`` is accepted for torch's
        signature; the work is asynchronous either way)."""
        self._settled()
        mesh = device_mesh if device_mesh is not None else self._mesh
        if placements is None:  # the same layout, or Replicate on another mesh
            placements = self._placements if mesh == self._mesh else None
        root, wire = _layout(mesh, placements)
        other = "" if root.name == self._mesh.name else root.name
        reply = self._session.transport.redistribute(self._name, wire, other, name, False,
                                                     _planner(planner))
        out = DTensor._adopt(self._session, reply.output, root, kind=self._kind)
        out.plan = _plan_from_proto(reply.plan)
        out.relayed_bytes = reply.relayed_bytes
        return out

    def explain_redistribute(self, placements: Sequence[Any], planner: str = "min_cost"
                             ) -> RedistributePlan:
        """The plan redistribute would run on this tensor's mesh, without running it."""
        _, wire = _layout(self._mesh, placements)
        self._settled()
        reply = self._session.transport.redistribute(self._name, wire, "", "", True,
                                                     _planner(planner))
        return _plan_from_proto(reply.plan)

    def save(self, path: str) -> Any:
        """Saves the tensor into the checkpoint directory ``path`` on the workers' filesystem
        (absolute; docs/checkpoints.md): every worker writes its own blocks, Partial dims
        reduced, replicas once; the previous checkpoint there stays readable until the new one is
        complete. Returns the reply (path, data_dir, files, saved_layout) once it is."""
        self._settled()
        return self._session.transport.save_tensor(self._name, path)

    def wait(self, timeout: Optional[float] = None) -> "DTensor":
        """Waits until the workers have written it; raises their error if they failed."""
        self._settled()
        self._session.transport.synchronize([self._name], timeout)
        self._state = "ready"
        return self

    synchronize = wait

    def refresh(self) -> "DTensor":
        """Fresh metadata from the coordinator (state, error)."""
        self._settled()
        self._update(self._session.transport.get_tensor(self._name))
        return self

    def free(self) -> None:
        """Frees the remote tensor now (the handle is unusable after); raises the error of the
        op that was to make it, if it failed."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._settled()
        self._session.transport.free_tensor(self._name)

    def detach_handle(self) -> "DTensor":
        """Keeps the remote tensor when the handle goes (free it by name later)."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return self

    # -- ops (tensor_math.py and tensor_shape.py hold torch's methods) ------------------------

    def _op(self, op: str, /, *args: Any, **kwargs: Any) -> "DTensor":
        return call(op, *args, **kwargs)

    def _op_outputs(self, op: str, count: int, /, *args: Any, **kwargs: Any
                    ) -> Tuple["DTensor", ...]:
        call_op, inputs = encode_call(op, args, kwargs, DTensor)
        return _run_outputs(call_op, inputs, count)

    def _dtype_if_known(self) -> Optional[_dt.DType]:
        return None if self._made is not None else self._dtype

    def _replicated(self, array: np.ndarray) -> "DTensor":
        return distribute_tensor(array, self._mesh, [Replicate()] * self._mesh.ndim)

    __array_ufunc__ = None  # numpy's operators defer to DTensor's: np.float32(2) * x is x's

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: Optional[dict] = None) -> Any:
        """torch's protocol: ``torch.softmax(x, -1)``, ``torch.cat([x, y])``,
        ``torch.nn.functional.relu(x)``... on DTensors run their op on the service
        (torch_function.py)."""
        from .torch_function import torch_function

        return torch_function(cls, func, types, args, kwargs or {})

    def __getattr__(self, name: str) -> Any:
        if name in TORCH_ONLY:
            raise unsupported(f"DTensor.{name}")
        raise AttributeError(f"'DTensor' object has no attribute '{name}'")

    def __bool__(self) -> bool:
        raise Unimplemented("the truth value of a DTensor needs its data: use full_tensor()")

    @staticmethod
    def from_local(local_tensor: Any, device_mesh: Optional[DeviceMesh] = None,
                   placements: Optional[Sequence[Any]] = None, *, run_check: bool = False,
                   shape: Optional[Sequence[int]] = None, stride: Optional[Sequence[int]] = None,
                   name: str = "", dtype: Any = None) -> "DTensor":
        """DTensor.from_local: ``local_tensor`` is every rank's local tensor, a list in the
        whole mesh's row-major rank order, or one tensor that every rank holds. ``shape`` (the
        global shape) is needed when shards are uneven; ``run_check`` broadcasts the Replicate
        dims from coordinate 0, as DTensor does; ``dtype`` converts the values first."""
        root, wire = _layout(device_mesh, placements)
        if stride is not None:
            raise Unimplemented("from_local(stride=...): the service keeps tensors row-major")
        n = root.size()
        if isinstance(local_tensor, (list, tuple)):
            if len(local_tensor) != n:
                raise InvalidArgument(f"from_local on mesh '{root.name}' takes {n} local tensors "
                                      f"(one per rank), not {len(local_tensor)}")
            buffers = [as_buffer(t, dtype) for t in local_tensor]
        else:
            buffers = [as_buffer(local_tensor, dtype)] * n
        kind = buffers[0].kind
        info = device_mesh.session.transport.from_local(buffers, root.name, wire, shape,
                                                         run_check, name)
        return DTensor._adopt(device_mesh.session, info, root, kind=kind)


def _planner(planner: str) -> int:
    names = {"min_cost": pb.tensor.MIN_COST, "min-cost": pb.tensor.MIN_COST,
             "greedy": pb.tensor.GREEDY}
    if planner not in names:
        raise InvalidArgument(f"unknown planner '{planner}'; expected min_cost or greedy")
    return names[planner]


# -- making DTensors -----------------------------------------------------------------------------


def distribute_tensor(tensor: Any, device_mesh: Optional[DeviceMesh] = None,
                      placements: Optional[Sequence[Any]] = None, *, src_data_rank: int = 0,
                      name: str = "", progress: ProgressArg = None, dtype: Any = None
                      ) -> DTensor:
    """distribute_tensor(tensor, device_mesh, placements): a numpy array or CPU torch tensor is
    streamed in 1 MiB chunks, each block straight to its worker where the session's
    ``direct_data`` allows (tessera.direct), else to the coordinator, which routes each rank's
    block to its worker as it arrives; replicas are broadcast by the workers from
    ``src_data_rank``. ``placements``
    default to Replicate on every dim (torch's default); on a view (``mesh["tp"]``) they apply
    to its dims, Replicate elsewhere. ``progress``: see tessera.progress. ``dtype`` converts
    the values first (bfloat16 from floats works without ml_dtypes or torch)."""
    root, wire = _layout(device_mesh, placements)
    buffer: HostBuffer = as_buffer(tensor, dtype)
    info = device_mesh.session.transport.distribute(buffer, root.name, wire, src_data_rank, name,
                                                     progress)
    return DTensor._adopt(device_mesh.session, info, root, kind=buffer.kind)


def get_tensor(name: str, session: Optional[Session] = None) -> DTensor:
    """An existing DTensor by name (a module's parameter, another tool's tensor); the handle
    does not free it."""
    from .session import get_session

    s = get_session(session)
    return DTensor._adopt(s, s.transport.get_tensor(name), None, owned=False)


def save(obj: Any, path: str) -> Any:
    """Saves a DTensor (see DTensor.save) or a Module (see Module.save_checkpoint) into the
    checkpoint directory ``path`` on the workers' filesystem."""
    if isinstance(obj, DTensor):
        return obj.save(path)
    if hasattr(obj, "save_checkpoint"):
        return obj.save_checkpoint(path)
    raise InvalidArgument(f"tessera.save takes a DTensor or a Module, not {type(obj).__name__}")


def load(path: str, device_mesh: DeviceMesh, placements: Sequence[Any], *, tensor: str = "",
         name: str = "") -> DTensor:
    """Loads a checkpoint (or a ``tessera shard`` directory) onto ``device_mesh`` as
    ``placements``, whatever mesh and world size it was saved from: every worker reads only the
    bytes its shard needs. ``tensor`` picks one of several saved tensors."""
    root, wire = _layout(device_mesh, placements)
    info = device_mesh.session.transport.load_tensor(path, root.name, wire, name, tensor)
    return DTensor._adopt(device_mesh.session, info, root)


_seed_lock = threading.Lock()
_seed_rng = random.Random()


def manual_seed(seed: int, session: Optional[Session] = None) -> None:
    """torch.manual_seed: seeds the seeds that rand and randn draw when none is given, and the
    random stream of ``session`` (default: the default session, if one is open) that the
    registry's random ops (randint, rand_like, dropout, tessera.ops.aten.rand, ...) draw from
    on the coordinator. Tessera's streams are Philox4x32-10 keyed by the seed at each element's
    global index: placement-invariant and reproducible, not bit-equal to torch's."""
    with _seed_lock:
        _seed_rng.seed(int(seed))
    if session is None:
        from . import session as _sessions
        session = _sessions._default
    if session is not None:
        session.transport.manual_seed(seed)


def _next_seed() -> int:
    with _seed_lock:
        return _seed_rng.getrandbits(63)


def _factory(kind: int, size: Tuple[Any, ...], device_mesh: Optional[DeviceMesh],
             placements: Any, dtype: Any, value: float = 0, seed: int = 0, name: str = ""
             ) -> DTensor:
    root, wire = _layout(device_mesh, placements)
    d = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
    info = device_mesh.session.transport.create_tensor(kind, root.name, size_arg(size), wire, d,
                                                        value, seed, name)
    return DTensor._adopt(device_mesh.session, info, root)


def zeros(*size: Any, device_mesh: Optional[DeviceMesh] = None,
          placements: Optional[Sequence[Any]] = None, dtype: Any = None, name: str = ""
          ) -> DTensor:
    """torch.distributed.tensor.zeros(*size, device_mesh=..., placements=..., dtype=...)."""
    return _factory(pb.tensor.ZEROS, size, device_mesh, placements, dtype, name=name)


def ones(*size: Any, device_mesh: Optional[DeviceMesh] = None,
         placements: Optional[Sequence[Any]] = None, dtype: Any = None, name: str = ""
         ) -> DTensor:
    """torch.distributed.tensor.ones."""
    return _factory(pb.tensor.ONES, size, device_mesh, placements, dtype, name=name)


def empty(*size: Any, device_mesh: Optional[DeviceMesh] = None,
          placements: Optional[Sequence[Any]] = None, dtype: Any = None, name: str = ""
          ) -> DTensor:
    """torch.distributed.tensor.empty: contents unspecified."""
    return _factory(pb.tensor.EMPTY, size, device_mesh, placements, dtype, name=name)


def full(size: _ShapeArg, fill_value: float, *, device_mesh: Optional[DeviceMesh] = None,
         placements: Optional[Sequence[Any]] = None, dtype: Any = None, name: str = ""
         ) -> DTensor:
    """torch.distributed.tensor.full(size, fill_value, ...)."""
    size_t = (size,) if isinstance(size, int) else (tuple(size),)
    return _factory(pb.tensor.FULL, size_t, device_mesh, placements, dtype, value=fill_value,
                    name=name)


def rand(*size: Any, device_mesh: Optional[DeviceMesh] = None,
         placements: Optional[Sequence[Any]] = None, dtype: Any = None,
         seed: Optional[int] = None, name: str = "") -> DTensor:
    """torch.distributed.tensor.rand: uniform [0, 1). Values depend on (seed, global index)
    only, so a shard equals that slice of the whole random tensor whatever the layout. Without
    ``seed``, the next of tessera.manual_seed's sequence."""
    return _factory(pb.tensor.RAND, size, device_mesh, placements, dtype,
                    seed=_next_seed() if seed is None else seed, name=name)


def randn(*size: Any, device_mesh: Optional[DeviceMesh] = None,
          placements: Optional[Sequence[Any]] = None, dtype: Any = None,
          seed: Optional[int] = None, name: str = "") -> DTensor:
    """torch.distributed.tensor.randn: standard normal, offset-based as rand."""
    return _factory(pb.tensor.RANDN, size, device_mesh, placements, dtype,
                    seed=_next_seed() if seed is None else seed, name=name)


def arange(start: Any, end: Any = None, step: Any = 1, *, device_mesh: Optional[DeviceMesh] = None,
           placements: Optional[Sequence[Any]] = None, dtype: Any = None) -> DTensor:
    """torch.arange on a mesh (aten::arange.start_step): ceil((end - start) / step) values,
    int64 from ints, float32 from floats, each rank computing its shard's."""
    if end is None:
        start, end = 0, start
    kw = {} if dtype is None else {"dtype": dtype}
    return call_factory("arange.start_step", start, end, step, device_mesh=device_mesh,
                        placements=placements, **kw)


def eye(n: int, m: Optional[int] = None, *, device_mesh: Optional[DeviceMesh] = None,
        placements: Optional[Sequence[Any]] = None, dtype: Any = None) -> DTensor:
    """torch.eye on a mesh (aten::eye, aten::eye.m)."""
    kw = {} if dtype is None else {"dtype": dtype}
    if m is None:
        return call_factory("eye", n, device_mesh=device_mesh, placements=placements, **kw)
    return call_factory("eye.m", n, m, device_mesh=device_mesh, placements=placements, **kw)


def randint(low: int, high: Any = None, size: Any = None, *,
            device_mesh: Optional[DeviceMesh] = None, placements: Optional[Sequence[Any]] = None,
            dtype: Any = None) -> DTensor:
    """torch.randint(low=0, high, size) on a mesh, from the session's random stream
    (tessera.manual_seed): uniform integers in [low, high), int64 unless ``dtype``."""
    if size is None:
        low, high, size = 0, low, high
    kw = {} if dtype is None else {"dtype": dtype}
    return call_factory("randint.low", low, high, list(size_arg((size,))),
                        device_mesh=device_mesh, placements=placements, **kw)


def rand_like(input: DTensor, *, dtype: Any = None,
              placements: Optional[Sequence[Any]] = None) -> DTensor:
    """torch.rand_like from the session's random stream: input's shape, mesh and (unless
    ``placements``) shards."""
    kw = {} if dtype is None else {"dtype": dtype}
    return call_factory("rand_like", input, placements=placements, **kw)


def randn_like(input: DTensor, *, dtype: Any = None,
               placements: Optional[Sequence[Any]] = None) -> DTensor:
    """torch.randn_like from the session's random stream."""
    kw = {} if dtype is None else {"dtype": dtype}
    return call_factory("randn_like", input, placements=placements, **kw)


def randint_like(input: DTensor, low: int, high: Optional[int] = None, *, dtype: Any = None,
                 placements: Optional[Sequence[Any]] = None) -> DTensor:
    """torch.randint_like(input, low=0, high) from the session's random stream."""
    if high is None:
        low, high = 0, low
    kw = {} if dtype is None else {"dtype": dtype}
    return call_factory("randint_like.low_dtype", input, low, high, placements=placements, **kw)


# -- ops -----------------------------------------------------------------------------------------


def call(name: str, /, *args: Any, **kwargs: Any) -> DTensor:
    """Runs op ``name`` of the service's registry ("softmax.int", "aten::softmax.int", or
    "softmax" for its default overload) on ``args`` and ``kwargs`` as its schema names them
    (op_args.py encodes them), with sharding propagation: the output's ``redistributions`` list
    the implicit redistributions the chosen strategy needed. On the op stream it returns at
    once, what the service refuses raising on the output's first touch. Of an op with several
    outputs it gives the first and frees the others once answered (tessera.ops.call_outputs
    gives them all)."""
    op, inputs = encode_call(name, args, kwargs, DTensor)
    return _run(op, inputs)


def _new_factory(name: str, x: DTensor, size: Tuple[Any, ...], dtype: Any,
                 placements: Optional[Sequence[Any]], *value: Any) -> DTensor:
    kw = {} if dtype is None else {"dtype": dtype}
    return call_factory(name, x, list(size_arg(size)), *value, placements=placements, **kw)


def call_factory(name: str, /, *args: Any, device_mesh: Optional[DeviceMesh] = None,
                 placements: Optional[Sequence[Any]] = None, **kwargs: Any) -> DTensor:
    """Runs factory op ``name`` of the registry (arange, full, eye, randint, new_zeros,
    rand_like, ...) with its output on ``device_mesh`` in ``placements`` (Replicate by default):
    a factory without a DTensor argument needs the mesh; one of a DTensor defaults to the
    input's mesh and the layout its strategies give."""
    op, inputs = encode_call(name, args, kwargs, DTensor)
    if device_mesh is None:
        if not inputs:
            raise InvalidArgument(f"{op.name} takes no DTensor, so it needs device_mesh= (and "
                                  "placements=) to make its output on")
        if placements is not None:
            device_mesh = inputs[0].device_mesh
    if device_mesh is None:
        return _run(op, inputs)
    root, wire = _layout(device_mesh, placements)
    if inputs and placements is None:
        wire = []
    return _run(op, inputs, root, wire)


def _run(op: Any, inputs: Sequence[DTensor], mesh: Optional[DeviceMesh] = None,
         placements: Sequence[Any] = ()) -> DTensor:
    """Runs an OpCall on its input DTensors (a factory's: on ``mesh`` in ``placements``): one
    RunOp, or on the op stream without waiting."""
    if not inputs and mesh is None:
        raise InvalidArgument(f"{op.name} takes a DTensor argument (numbers alone have no mesh)")
    if not inputs:
        return _run_factory(op, mesh, placements)
    first = inputs[0]
    session = _session_of(op, inputs)
    transport = session.transport
    # A layout only for a factory that asks for one (the transport's plain call otherwise).
    layout = {} if mesh is None else {"mesh": mesh.name, "placements": placements}
    if transport.op_stream is None:
        reply = transport.run_op(op, [x.name for x in inputs], **layout)
        _free_other_outputs(session, reply)
        return _adopt_outputs(session, reply, [reply.output], first)[0]
    name = session.next_tensor_name()
    made = transport.run_op_on_stream(op, [x.name for x in inputs], name, _pending(inputs),
                                      **layout)
    return DTensor._on_stream(session, name, first.device_mesh, first._kind, made)


def _run_outputs(op: Any, inputs: Sequence[DTensor], count: Optional[int]
                 ) -> Tuple[DTensor, ...]:
    """Runs an OpCall with several outputs, ``count`` of them, on its input DTensors: one
    RunOp, or on the op stream one call naming every output, each output's handle answered by
    the call's one outcome. ``count`` None (a ``Tensor[]`` whose length only the service
    knows) or 0: the op stream's call is waited for."""
    if not inputs:
        raise InvalidArgument(f"{op.name} takes a DTensor argument (numbers alone have no mesh)")
    first = inputs[0]
    session = _session_of(op, inputs)
    transport = session.transport
    names = [x.name for x in inputs]
    if transport.op_stream is None:
        reply = transport.run_op(op, names)
    elif not count:
        made = transport.run_op_on_stream(op, names, session.next_tensor_name(),
                                          _pending(inputs))
        transport.await_outcome(made, f"the op that makes '{made.name}'")
        error = made.error()
        if error is not None:
            raise error
        reply = made.reply
    else:
        outputs = [session.next_tensor_name() for _ in range(count)]
        if count == 1:  # `output`, which a decomposed op's graph names too
            made = transport.run_op_on_stream(op, names, outputs[0], _pending(inputs))
        else:
            made = transport.run_op_on_stream(op, names, "", _pending(inputs), outputs=outputs)
        return tuple(DTensor._on_stream(session, name, first.device_mesh, first._kind, made, i)
                     for i, name in enumerate(outputs))
    infos = list(reply.outputs) or ([reply.output] if reply.output.name else [])
    return _adopt_outputs(session, reply, infos, first)


def _session_of(op: Any, inputs: Sequence[DTensor]) -> Session:
    """The one session of an op's input DTensors."""
    session = inputs[0].session
    for x in inputs:
        if x.session is not session:
            raise InvalidArgument(f"{op.name}: an op's DTensors must come from one session")
    return session


def _pending(inputs: Sequence[DTensor]) -> Tuple[Outcome, ...]:
    """The outcomes of the inputs' own ops not answered yet; raises why an input does not
    exist when its op failed."""
    pending: List[Outcome] = []
    for x in inputs:
        made = x._made
        if made is not None:
            if made.failed:
                x._settled()
            if not made.done:
                pending.append(made)
    return tuple(pending)


def _adopt_outputs(session: Session, reply: Any, infos: Sequence[Any], first: DTensor
                   ) -> Tuple[DTensor, ...]:
    """Handles of the outputs ``infos`` of OpReply ``reply``, each with its redistributions."""
    redistributions = _redistributions_from_proto(reply)
    outs = []
    for info in infos:
        out = DTensor._adopt(session, info, first.device_mesh, kind=first._kind)
        out._redistributions = redistributions
        outs.append(out)
    return tuple(outs)


def _free_other_outputs(session: Session, reply: Any) -> None:
    """Frees the outputs past the first of an op run for its first only (``call``)."""
    for info in reply.outputs[1:]:
        session.transport.free_tensor_later(info.name)


def _run_factory(op: Any, mesh: DeviceMesh, placements: Sequence[Any]) -> DTensor:
    """Runs a factory without DTensor inputs on ``mesh`` (a root mesh) in ``placements``."""
    session = mesh.session
    transport = session.transport
    if transport.op_stream is None:
        reply = transport.run_op(op, [], mesh=mesh.name, placements=placements)
        return DTensor._adopt(session, reply.output, mesh)
    name = session.next_tensor_name()
    made = transport.run_op_on_stream(op, [], name, (), mesh=mesh.name, placements=placements)
    return DTensor._on_stream(session, name, mesh, "numpy", made)


def _redistributions_from_proto(reply: Any) -> Tuple[InputRedistribution, ...]:
    """An OpReply's implicit redistributions."""
    return tuple(
        InputRedistribution(r.input, tuple(from_proto(p) for p in r.from_placements),
                            tuple(from_proto(p) for p in r.to_placements),
                            _plan_from_proto(r.plan))
        for r in reply.redistributions)
