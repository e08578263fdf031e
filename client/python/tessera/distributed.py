"""torch.distributed's collectives on the local tensors the ranks of a mesh hold.

A :class:`MeshTensor` is one named local tensor on every rank of a mesh (each rank's may differ):
upload it with :func:`tensor`, read a rank's with ``.to_local(rank)``. The collectives take
torch.distributed's names and arguments; ``group`` is a mesh or a view of one dim
(``mesh["tp"]``), and the collective runs on every process group of that dim at once. In-place
collectives (all_reduce, broadcast, reduce) change their tensor; the others write an output
tensor (a new one unless ``output`` names one) and return it. With ``async_op=True`` they return
a :class:`Work` once the collective is queued; the mesh runs commands in order, so later calls
may use the output at once."""

from __future__ import annotations

import queue
import secrets
import threading
import weakref
from typing import Any, List, Optional, Sequence, Union

from .errors import FailedPrecondition, InvalidArgument, error_for, translate_errors
from .interop import as_buffer, wrap_output
from .mesh import DeviceMesh
from .placements import REDUCE_OPS
from .session import Session, get_session
from .transport import pb

__all__ = ["ReduceOp", "MeshTensor", "Work", "tensor", "all_reduce", "broadcast", "reduce",
           "all_gather_into_tensor", "reduce_scatter_tensor", "gather", "scatter",
           "all_to_all_single", "send_recv", "barrier", "all_gather", "reduce_scatter",
           "all_to_all", "CollectiveStream", "stream"]


class ReduceOp:
    """torch.distributed.ReduceOp's members, as the strings every call also takes."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"


def _reduce_op(op: Any) -> int:
    name = str(op).split(".")[-1].lower()  # "sum", ReduceOp.SUM, torch's ReduceOp.SUM
    name = {"prod": "product", "premul_sum": "?"}.get(name, name)
    if name not in REDUCE_OPS:
        raise InvalidArgument(f"unknown reduce op {op!r}; expected one of {', '.join(REDUCE_OPS)}")
    return REDUCE_OPS[name]


class MeshTensor:
    """A local tensor named ``name`` on every rank of ``mesh``. The handle deletes it when it
    goes, unless it was made with an explicit name (or ``keep()``)."""

    def __init__(self, mesh: DeviceMesh, name: str, owned: bool = False,
                 local_shapes: Optional[Sequence[Any]] = None, kind: str = "numpy") -> None:
        self.mesh = mesh.root_mesh
        self.name = name
        self.kind = kind
        self.local_shapes: List[Any] = list(local_shapes or [])
        self._finalizer = weakref.finalize(self, mesh.session.transport.delete_local_later,
                                           mesh.name, name) if owned else None

    def to_local(self, rank: int, *, kind: Optional[str] = None) -> Any:
        """Rank ``rank``'s local tensor (row-major mesh position)."""
        dtype, array = self.mesh.session.transport.get_local(self.mesh.name, int(rank), self.name)
        return wrap_output(array, dtype, kind or self.kind)

    def local_tensors(self, *, kind: Optional[str] = None) -> List[Any]:
        """Every rank's local tensor, row-major."""
        return [self.to_local(r, kind=kind) for r in range(self.mesh.size())]

    def keep(self) -> "MeshTensor":
        """Keeps the tensor on the mesh when the handle goes."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return self

    def delete(self) -> None:
        """Deletes it on every rank now."""
        self.keep()
        self.mesh.session.transport.delete_local(self.mesh.name, self.name)

    def __repr__(self) -> str:
        return f"MeshTensor('{self.name}' on mesh '{self.mesh.name}')"


def tensor(local_tensors: Any, device_mesh: DeviceMesh, name: Optional[str] = None,
           dtype: Any = None) -> MeshTensor:
    """Uploads every rank's local tensor (a list in the mesh's row-major rank order, or one
    tensor every rank gets) as local tensor ``name`` (default: a fresh name) of the mesh."""
    root = device_mesh.root_mesh
    n = root.size()
    if isinstance(local_tensors, (list, tuple)):
        if len(local_tensors) != n:
            raise InvalidArgument(f"mesh '{root.name}' has {n} ranks; got {len(local_tensors)} "
                                  "local tensors")
        buffers = [as_buffer(t, dtype) for t in local_tensors]
    else:
        buffers = [as_buffer(local_tensors, dtype)] * n
    owned = name is None
    name = name or f"local-{secrets.token_hex(6)}"
    for rank, b in enumerate(buffers):
        root.session.transport.put_local(root.name, rank, name, b)
    return MeshTensor(root, name, owned, [b.shape for b in buffers], buffers[0].kind)


class Work:
    """A collective started with ``async_op=True``: ``wait()`` returns its output (or None for
    an in-place one) or raises its error; each may be waited on once."""

    def __init__(self, mesh: DeviceMesh, work: int, output: Optional[MeshTensor]) -> None:
        self.mesh = mesh
        self.id = work
        self._output = output
        self._done = False

    def wait(self, timeout: Optional[float] = None) -> Optional[MeshTensor]:
        if not self._done:
            (result,) = self.mesh.session.transport.wait_collectives(self.mesh.name, [self.id],
                                                                     timeout)
            self._done = True
            if result.code != 0:
                raise error_for(result.code, result.message)
            _note_shapes(self._output, result.reply)
        return self._output

    def is_completed(self) -> bool:
        return self._done


def _note_shapes(output: Optional[MeshTensor], reply: Any) -> None:
    if output is not None and reply.outputs:
        output.local_shapes = [tuple(o.shape.dims) for o in reply.outputs]


def _group(t: MeshTensor, group: Optional[DeviceMesh]) -> str:
    if group is None:
        return ""
    if group.name != t.mesh.name:
        raise InvalidArgument(f"tensor '{t.name}' is on mesh '{t.mesh.name}', the group on mesh "
                              f"'{group.name}'")
    return group.group_dim()


def _output(t: MeshTensor, output: Union[MeshTensor, str, None]) -> MeshTensor:
    if isinstance(output, MeshTensor):
        return output
    if isinstance(output, str):
        return MeshTensor(t.mesh, output, kind=t.kind)
    return MeshTensor(t.mesh, f"local-{secrets.token_hex(6)}", owned=True, kind=t.kind)


def _run(op: int, t: MeshTensor, group: Optional[DeviceMesh], async_op: bool,
         output: Optional[MeshTensor] = None, reduce_op: Any = "sum", root: int = 0,
         peer: int = 0) -> Union[MeshTensor, Work, None]:
    if not isinstance(t, MeshTensor):
        raise InvalidArgument(f"collectives take a tessera.distributed.MeshTensor, not "
                              f"{type(t).__name__} (upload with tessera.distributed.tensor)")
    request = pb.collective.CollectiveRequest(
        mesh=t.mesh.name, mesh_dim=_group(t, group), op=op, input=t.name,
        output=output.name if output is not None else "", reduce_op=_reduce_op(reduce_op),
        root=int(root), peer=int(peer), async_op=async_op)
    stream = getattr(_streams, "current", None)
    if stream is not None:
        work = stream._send(request, output)
        return work if async_op else output
    reply = t.mesh.session.transport.run_collective(request)
    if async_op:
        return Work(t.mesh, reply.work, output)
    _note_shapes(output if output is not None else t, reply)
    return output


def all_reduce(tensor: MeshTensor, op: Any = ReduceOp.SUM, group: Optional[DeviceMesh] = None,
               async_op: bool = False) -> Optional[Work]:
    """In place: every rank gets the reduction over its group."""
    return _run(pb.worker.ALL_REDUCE_OP, tensor, group, async_op, reduce_op=op)


def broadcast(tensor: MeshTensor, src: int = 0, group: Optional[DeviceMesh] = None,
              async_op: bool = False) -> Optional[Work]:
    """In place: group rank ``src``'s tensor to every rank of its group."""
    return _run(pb.worker.BROADCAST, tensor, group, async_op, root=src)


def reduce(tensor: MeshTensor, dst: int = 0, op: Any = ReduceOp.SUM,
           group: Optional[DeviceMesh] = None, async_op: bool = False) -> Optional[Work]:
    """In place on group rank ``dst``; the other ranks keep theirs."""
    return _run(pb.worker.REDUCE, tensor, group, async_op, reduce_op=op, root=dst)


def all_gather_into_tensor(output_tensor: Union[MeshTensor, str, None], input_tensor: MeshTensor,
                           group: Optional[DeviceMesh] = None, async_op: bool = False
                           ) -> Union[MeshTensor, Work]:
    """Every rank gets its group's tensors concatenated along dim 0 (``output_tensor``: a
    MeshTensor or name to write, None for a new one)."""
    return _run(pb.worker.ALL_GATHER_OP, input_tensor, group, async_op,
                _output(input_tensor, output_tensor))


def reduce_scatter_tensor(output: Union[MeshTensor, str, None], input: MeshTensor,
                          op: Any = ReduceOp.SUM, group: Optional[DeviceMesh] = None,
                          async_op: bool = False) -> Union[MeshTensor, Work]:
    """The group's reduction, split along dim 0: group rank i gets piece i."""
    return _run(pb.worker.REDUCE_SCATTER_OP, input, group, async_op, _output(input, output),
                reduce_op=op)


def all_to_all_single(output: Union[MeshTensor, str, None], input: MeshTensor,
                      group: Optional[DeviceMesh] = None, async_op: bool = False
                      ) -> Union[MeshTensor, Work]:
    """Piece j (along dim 0) of group rank i's tensor goes to group rank j, as piece i."""
    return _run(pb.worker.ALL_TO_ALL_OP, input, group, async_op, _output(input, output))


def gather(tensor: MeshTensor, dst: int = 0, *, group: Optional[DeviceMesh] = None,
           async_op: bool = False, output: Union[MeshTensor, str, None] = None
           ) -> Union[MeshTensor, Work]:
    """Group rank ``dst`` gets its group's tensors concatenated along dim 0."""
    return _run(pb.worker.GATHER, tensor, group, async_op, _output(tensor, output), root=dst)


def scatter(tensor: MeshTensor, src: int = 0, *, group: Optional[DeviceMesh] = None,
            async_op: bool = False, output: Union[MeshTensor, str, None] = None
            ) -> Union[MeshTensor, Work]:
    """Group rank ``src``'s tensor split along dim 0, piece i to group rank i."""
    return _run(pb.worker.SCATTER, tensor, group, async_op, _output(tensor, output), root=src)


def send_recv(tensor: MeshTensor, src: int, dst: int, *, group: Optional[DeviceMesh] = None,
              async_op: bool = False, output: Union[MeshTensor, str, None] = None
              ) -> Union[MeshTensor, Work]:
    """send on group rank ``src`` paired with recv on group rank ``dst``."""
    return _run(pb.worker.SEND_RECV, tensor, group, async_op, _output(tensor, output), root=src,
                peer=dst)


def barrier(group: DeviceMesh, async_op: bool = False) -> Optional[Work]:
    """Every rank of each group waits for the others."""
    request = pb.collective.CollectiveRequest(mesh=group.name, mesh_dim=group.group_dim(),
                                              op=pb.worker.BARRIER, async_op=async_op,
                                              reduce_op=REDUCE_OPS["sum"])
    stream = getattr(_streams, "current", None)
    if stream is not None:
        work = stream._send(request, None)
        return work if async_op else None
    reply = group.session.transport.run_collective(request)
    return Work(group.root_mesh, reply.work, None) if async_op else None


# Shorter names for the same collectives: each takes (output, input) and writes one tensor
# (torch's list-taking all_gather and all_to_all have no single-controller equivalent).
all_gather = all_gather_into_tensor
reduce_scatter = reduce_scatter_tensor
all_to_all = all_to_all_single


_streams = threading.local()


class StreamWork:
    """A collective sent on a CollectiveStream: ``wait()`` reads the stream's outcomes in order
    up to this one and raises its error, if it failed (within the stream's own deadline)."""

    def __init__(self, stream: "CollectiveStream", index: int, output: Optional[MeshTensor]):
        self._stream = stream
        self._index = index
        self._output = output

    def wait(self, timeout: Optional[float] = None) -> Optional[MeshTensor]:
        result = self._stream._outcome(self._index)
        if result.code != 0:
            raise error_for(result.code, result.message)
        _note_shapes(self._output, result.reply)
        return self._output

    def is_completed(self) -> bool:
        return self._index < len(self._stream._results)


class CollectiveStream:
    """CollectiveService's ordered stream, as torch's coalescing of collectives: inside
    ``with tessera.distributed.stream():`` every collective of this thread is sent on one gRPC
    stream with no round trip each and runs in order; the outputs are usable at once; leaving the
    block waits for every outcome and raises the first failure. ``async_op=True`` calls return
    a StreamWork to wait on one. At most 1024 outcomes may be unread."""

    MAX_UNREAD = 1024
    _END = object()

    def __init__(self, session: Optional[Session] = None, timeout: float = 600.0) -> None:
        s = get_session(session)
        self._requests: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._call = s.transport.collectives.CollectiveStream(
            iter(self._requests.get, self._END), timeout=timeout, metadata=s.transport.metadata)
        self._results: List[Any] = []
        self._sent = 0
        self._closed = False

    def _send(self, request: Any, output: Optional[MeshTensor]) -> StreamWork:
        if self._closed:
            raise FailedPrecondition("the collective stream has ended")
        if self._sent - len(self._results) >= self.MAX_UNREAD:
            self._outcome(self._sent - self.MAX_UNREAD)  # read one to make room
        request.async_op = True
        self._requests.put(request)
        self._sent += 1
        return StreamWork(self, self._sent - 1, output)

    def _outcome(self, index: int) -> Any:
        while len(self._results) <= index:
            with translate_errors():
                result = next(self._call, None)
            if result is None:
                raise FailedPrecondition(f"the collective stream ended after {len(self._results)} "
                                         f"of {self._sent} outcomes")
            self._results.append(result)
        return self._results[index]

    def close(self) -> None:
        """Waits for every outcome; raises the first failure."""
        if self._closed:
            return
        self._closed = True
        self._requests.put(self._END)
        first = None
        try:
            for i in range(self._sent):
                result = self._outcome(i)
                if result.code != 0 and first is None:
                    first = error_for(result.code, result.message)
        finally:
            self._call.cancel()  # a no-op once it ended
        if first is not None:
            raise first

    def __enter__(self) -> "CollectiveStream":
        if getattr(_streams, "current", None) is not None:
            raise FailedPrecondition("a collective stream is already open in this thread")
        _streams.current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _streams.current = None
        if exc[0] is None:
            self.close()
        else:
            self._closed = True
            self._requests.put(self._END)
            self._call.cancel()


def stream(session: Optional[Session] = None, timeout: float = 600.0) -> CollectiveStream:
    """``with tessera.distributed.stream(): ...``: see CollectiveStream."""
    return CollectiveStream(session, timeout)
