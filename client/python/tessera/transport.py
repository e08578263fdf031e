"""Every gRPC call of the client, in one place: the coordinator's MeshService, DTensorService,
CollectiveService and ModuleService, each call with its deadline and the client id, errors
raised as Tessera exceptions, tensor bytes streamed in 1 MiB chunks.

The handles (DeviceMesh, DTensor, MeshTensor, Module) call only this class. DTensor ops and frees
go on the session's ordered op stream (op_stream.py) unless it is turned off; every other call
first waits until the stream has answered what was sent on it, so a later call sees its ops."""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple

import grpc

from . import dtypes as _dt
from .direct import (RelayMayHelp, WorkerChannels, distribute_direct, download_direct,
                     from_local_direct)
from .errors import DataLoss, DeadlineExceeded, TesseraError, translate_errors
from .interop import Assembler, HostBuffer, chunks
from .op_stream import OpStream, Outcome
from .progress import Progress, ProgressArg
from .v1 import (collective_pb2, collective_pb2_grpc, dtensor_pb2, dtensor_pb2_grpc, mesh_pb2, mesh_pb2_grpc,
                 module_pb2, module_pb2_grpc, tensor_pb2, types_pb2, worker_pb2)

__all__ = ["Transport", "pb"]


class pb:  # noqa: N801 - a namespace of the generated modules
    """The generated message modules, for the handles that build requests."""

    types = types_pb2
    tensor = tensor_pb2
    mesh = mesh_pb2
    collective = collective_pb2
    module = module_pb2
    worker = worker_pb2


def shape_proto(shape: Sequence[int]) -> Any:
    return types_pb2.Shape(dims=[int(d) for d in shape])


def inline_tensor(buffer: HostBuffer) -> Any:
    """A tensor inline (module inputs): dtype, shape, bytes (one copy, into the message)."""
    return worker_pb2.InlineTensor(dtype=buffer.dtype.number, shape=shape_proto(buffer.shape),
                                   data=buffer.bytes_view().tobytes())


def _stream_calls(calls: List[Any]) -> Any:
    """One message of the op stream."""
    return dtensor_pb2.StreamCalls(calls=calls)


def _free_call(name: str) -> Any:
    return dtensor_pb2.StreamCall(free=tensor_pb2.FreeTensorRequest(name=name))


def read_inline(t: Any, what: str) -> Tuple[_dt.DType, Any]:
    """An InlineTensor's dtype and numpy array (its storage dtype), checking the byte count."""
    import numpy as np

    dtype = _dt.from_number(t.dtype)
    shape = tuple(t.shape.dims)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(t.data) != expected:
        raise DataLoss(f"{what}: {len(t.data)} bytes for {dtype.name}{list(shape)} "
                       f"({expected} expected)")
    array = np.frombuffer(t.data, dtype=dtype.storage).reshape(shape)
    return dtype, array


class Transport:
    """The client's calls over one channel; ``timeout`` and ``transfer_timeout`` in seconds;
    ``op_stream``: DTensor ops and frees on the ordered op stream (else one unary call each);
    ``direct_data`` ("auto", "on", "off") and ``workers`` (channels straight to workers): how
    distribute_tensor's bytes travel (tessera.direct)."""

    def __init__(self, channel: grpc.Channel, client_id: str, timeout: float,
                 transfer_timeout: float, op_stream: bool = True, direct_data: str = "off",
                 workers: Optional[WorkerChannels] = None) -> None:
        self.channel = channel
        self.direct_data = direct_data if workers is not None else "off"
        self.workers = workers
        self.metadata = (("tessera-client", client_id),)
        self.timeout = timeout
        self.transfer_timeout = transfer_timeout
        self.meshes = mesh_pb2_grpc.MeshServiceStub(channel)
        self.dtensors = dtensor_pb2_grpc.DTensorServiceStub(channel)
        self.collectives = collective_pb2_grpc.CollectiveServiceStub(channel)
        self.modules = module_pb2_grpc.ModuleServiceStub(channel)
        self.op_stream: Optional[OpStream] = OpStream(
            self._open_op_stream, _stream_calls) if op_stream else None
        self._later: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_later, name="tessera-frees", daemon=True)
        self._sender.start()

    # -- plumbing --------------------------------------------------------------------------------

    def settle(self) -> None:
        """Waits (up to the plain deadline) until the op stream has answered what was sent on
        it, so that the call that follows sees its tensors."""
        if self.op_stream is not None:
            self.op_stream.flush(self.timeout)

    def unary(self, method: Any, request: Any, timeout: Optional[float] = None,
              settle: bool = True) -> Any:
        """A unary call with a deadline, after the op stream's calls; its reply."""
        if settle:
            self.settle()
        with translate_errors():
            return method(request, timeout=timeout or self.timeout, metadata=self.metadata)

    def stream_in(self, method: Any, requests: Iterator[Any], timeout: Optional[float] = None
                  ) -> Any:
        """A client-streaming call with the transfer deadline; its reply."""
        self.settle()
        with translate_errors():
            return method(requests, timeout=timeout or self.transfer_timeout,
                          metadata=self.metadata)

    def stream_out(self, method: Any, request: Any, timeout: Optional[float] = None
                   ) -> Iterator[Any]:
        """A server-streaming call with the transfer deadline; its messages."""
        self.settle()
        call = method(request, timeout=timeout or self.transfer_timeout, metadata=self.metadata)
        try:
            with translate_errors():
                for message in call:
                    yield message
        finally:
            call.cancel()  # a no-op once the stream has ended

    def receive_tensor(self, messages: Iterable[Any], what: str,
                       progress: ProgressArg = None) -> Tuple[_dt.DType, Any]:
        """A stream of TensorData / TensorChunk messages as (dtype, numpy array)."""
        tensor = Assembler(what)
        bar: Optional[Progress] = None
        try:
            for m in messages:
                if not tensor.started:
                    tensor.start(_dt.from_number(m.dtype), m.shape.dims)
                    bar = Progress(tensor.expected, what, progress)
                tensor.append(m.data)
                if bar is not None:
                    bar.add(len(m.data))
        finally:
            if bar is not None:
                bar.close()
            if hasattr(messages, "close"):
                messages.close()  # ends the call now, not in a finalizer
        return tensor.dtype, tensor.finish()

    # -- meshes ----------------------------------------------------------------------------------

    def list_workers(self) -> Sequence[Any]:
        return self.unary(self.meshes.ListWorkers, mesh_pb2.ListWorkersRequest()).workers

    def create_mesh(self, name: str, device_type: str, shape: Sequence[int],
                    dim_names: Sequence[str], worker_ids: Sequence[int],
                    collective_timeout: float) -> Any:
        request = mesh_pb2.CreateMeshRequest(
            name=name, device_type=device_type, shape=list(shape), dim_names=list(dim_names),
            worker_ids=list(worker_ids), timeout_ms=int(collective_timeout * 1000))
        # Setting up the communicators may take up to the collective timeout.
        return self.unary(self.meshes.CreateMesh, request, collective_timeout + self.timeout)

    def get_mesh(self, name: str) -> Any:
        return self.unary(self.meshes.GetMesh, mesh_pb2.GetMeshRequest(name=name))

    def list_meshes(self) -> Sequence[Any]:
        return self.unary(self.meshes.ListMeshes, mesh_pb2.ListMeshesRequest()).meshes

    def delete_mesh(self, name: str) -> None:
        self.unary(self.meshes.DeleteMesh, mesh_pb2.DeleteMeshRequest(name=name))

    # -- DTensors --------------------------------------------------------------------------------

    def keep_alive(self, timeout: Optional[float] = None) -> float:
        """Renews the lease; the grace period in seconds."""
        reply = self.unary(self.dtensors.KeepAlive, tensor_pb2.KeepAliveRequest(), timeout,
                           settle=False)
        return reply.grace_ms / 1000.0

    def distribute(self, buffer: HostBuffer, mesh: str, placements: Sequence[Any],
                   src_data_rank: int, name: str, progress: ProgressArg) -> Any:
        """distribute_tensor: the header, then the full tensor's bytes in chunks."""
        header = tensor_pb2.DistributeHeader(
            name=name, mesh=mesh, placements=list(placements), dtype=buffer.dtype.number,
            shape=shape_proto(buffer.shape), src_data_rank=src_data_rank)
        if self.direct_data != "off" and self.workers is not None:
            bar = Progress(buffer.nbytes, "distribute_tensor", progress)
            try:
                self.settle()
                return distribute_direct(self, self.workers, buffer, header, bar.add)
            except RelayMayHelp as failed:
                if self.direct_data == "on":
                    raise failed.cause from None
            finally:
                bar.close()
        bar = Progress(buffer.nbytes, "distribute_tensor", progress)

        def requests() -> Iterator[Any]:
            first = True
            for piece in chunks(buffer.bytes_view()):
                chunk = tensor_pb2.DistributeChunk(data=piece.tobytes())
                if first:
                    chunk.header.CopyFrom(header)
                    first = False
                yield chunk
                bar.add(len(piece))

        try:
            return self.stream_in(self.dtensors.DistributeTensor, requests())
        finally:
            bar.close()

    def from_local(self, locals_: Sequence[HostBuffer], mesh: str, placements: Sequence[Any],
                   shape: Optional[Sequence[int]], run_check: bool, name: str) -> Any:
        """DTensor.from_local: every rank's shard, one rank after another."""
        dtype = locals_[0].dtype
        header = tensor_pb2.FromLocalHeader(name=name, mesh=mesh, placements=list(placements),
                                            dtype=dtype.number, run_check=run_check)
        if shape is not None:
            header.shape.CopyFrom(shape_proto(shape))
        if self.direct_data != "off" and self.workers is not None and locals_:
            try:
                self.settle()
                return from_local_direct(self, self.workers, locals_, header, lambda n: None)
            except RelayMayHelp as failed:
                if self.direct_data == "on":
                    raise failed.cause from None

        def requests() -> Iterator[Any]:
            for rank, buffer in enumerate(locals_):
                first = True
                for piece in chunks(buffer.bytes_view()):
                    chunk = tensor_pb2.FromLocalChunk(data=piece.tobytes())
                    if first:
                        if rank == 0:
                            chunk.header.CopyFrom(header)
                        chunk.begins_rank = True
                        chunk.rank = rank
                        chunk.local_shape.CopyFrom(shape_proto(buffer.shape))
                        first = False
                    yield chunk

        return self.stream_in(self.dtensors.FromLocal, requests())

    def read_direct(self, request: Any, what: str,
                    progress: ProgressArg = None) -> Optional[Tuple[_dt.DType, Any]]:
        """full_tensor / to_local on the direct path when ``direct_data`` allows; None where
        the relay is to serve it instead."""
        if self.direct_data == "off" or self.workers is None:
            return None
        bar: Optional[Progress] = None

        def received(n: int, total: int) -> None:
            nonlocal bar
            if bar is None:
                bar = Progress(total, what, progress)
            bar.add(n)

        try:
            self.settle()
            return download_direct(self, self.workers, request, received)
        except RelayMayHelp as failed:
            if self.direct_data == "on":
                raise failed.cause from None
            return None
        except TesseraError:
            # A read changes nothing: "auto" relays after any failure, whose answer (e.g. why
            # the tensor's write failed) is the relay's.
            if self.direct_data == "on":
                raise
            return None
        finally:
            if bar is not None:
                bar.close()

    def to_local(self, name: str, rank: int) -> Tuple[_dt.DType, Any]:
        what = f"to_local of '{name}' on rank {rank}"
        direct = self.read_direct(dtensor_pb2.PlanDownloadRequest(name=name, rank=rank), what)
        if direct is not None:
            return direct
        messages = self.stream_out(self.dtensors.ToLocal,
                                   tensor_pb2.ToLocalRequest(name=name, rank=rank))
        return self.receive_tensor(messages, f"to_local of '{name}' on rank {rank}")

    def full_tensor(self, name: str, progress: ProgressArg) -> Tuple[_dt.DType, Any]:
        direct = self.read_direct(dtensor_pb2.PlanDownloadRequest(name=name, full=True),
                                  f"full_tensor of '{name}'", progress)
        if direct is not None:
            return direct
        messages = self.stream_out(self.dtensors.FullTensor,
                                   tensor_pb2.FullTensorRequest(name=name))
        return self.receive_tensor(messages, f"full_tensor of '{name}'", progress)

    def create_tensor(self, factory: int, mesh: str, shape: Sequence[int],
                      placements: Sequence[Any], dtype: _dt.DType, value: float, seed: int,
                      name: str) -> Any:
        request = tensor_pb2.CreateTensorRequest(
            name=name, mesh=mesh, placements=list(placements), dtype=dtype.number,
            shape=shape_proto(shape), factory=factory, value=float(value), seed=int(seed))
        return self.unary(self.dtensors.CreateTensor, request)

    def get_tensor(self, name: str) -> Any:
        return self.unary(self.dtensors.GetTensor, tensor_pb2.GetTensorRequest(name=name))

    def list_tensors(self, mesh: str = "") -> Sequence[Any]:
        return self.unary(self.dtensors.ListTensors,
                          tensor_pb2.ListTensorsRequest(mesh=mesh)).tensors

    def free_tensor(self, name: str) -> None:
        """Frees a DTensor: on the op stream (after the ops queued there that read it) when it
        is on, else by a unary call."""
        if self.op_stream is None:
            self.unary(self.dtensors.FreeTensor, tensor_pb2.FreeTensorRequest(name=name))
            return
        outcome = self.op_stream.send(_free_call(name), name)
        self.await_outcome(outcome, f"the free of '{name}'")
        error = outcome.error()
        if error is not None:
            raise error

    def free_tensor_later(self, name: str, made: Optional[Outcome] = None) -> None:
        """Frees a DTensor without waiting (a dropped handle's). Safe in a finalizer: it only
        queues; the sending thread puts it on the op stream (or makes the unary call). ``made``:
        the outcome of the op that was to make it; nothing is freed if that op failed (the name
        may be another tensor's)."""
        self._later.put(("free", (name, made)))

    def run_op_on_stream(self, op: Any, inputs: Sequence[str], output: str,
                         pending_inputs: Tuple[Outcome, ...], mesh: str = "",
                         placements: Sequence[Any] = (), outputs: Sequence[str] = ()
                         ) -> Outcome:
        """Sends an op on the op stream, described, without waiting; its outcome (``reply``:
        the OpReply RunOp would give). ``pending_inputs``: the outcomes of the inputs' own ops
        that are not known yet. ``outputs``: the names of an op's several outputs (``output``
        then empty); the outcome is named after the first."""
        request = tensor_pb2.OpRequest(op=op, inputs=inputs, output=output, mesh=mesh,
                                       placements=list(placements), outputs=list(outputs))
        call = dtensor_pb2.StreamCall(op=request, describe=True)
        assert self.op_stream is not None
        return self.op_stream.send(call, output or next(iter(outputs), ""), pending_inputs)

    def await_outcome(self, outcome: Outcome, what: str) -> None:
        """Waits up to the plain deadline for a stream call's result (DeadlineExceeded
        naming ``what`` if it does not come)."""
        if not outcome.wait(self.timeout):
            raise DeadlineExceeded(f"{what} is not answered on the op stream after "
                                   f"{self.timeout:g} s")

    def _open_op_stream(self, requests: Iterator[Any], timeout: float) -> Any:
        return self.dtensors.OpStream(requests, timeout=timeout, metadata=self.metadata)

    def delete_local_later(self, mesh: str, name: str) -> None:
        """Deletes a mesh's local tensor without waiting (a dropped handle's). Safe in a
        finalizer."""
        self._later.put((self.collectives.DeleteTensor,
                         collective_pb2.DeleteTensorRequest(mesh=mesh, tensor=name)))

    def _send_later(self) -> None:
        """The thread that sends what *_later queued. Finalizers only queue: one may run during
        garbage collection inside a gRPC call, which must not start another."""
        while True:
            item = self._later.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            method, request = item
            try:
                if method == "free":
                    name, made = request
                    if made is not None and (not made.wait(self.timeout) or made.failed):
                        continue
                    if self.op_stream is not None:
                        self.op_stream.send(_free_call(name), name)
                        continue
                    method, request = (self.dtensors.FreeTensor,
                                       tensor_pb2.FreeTensorRequest(name=name))
                method(request, timeout=5.0, metadata=self.metadata)
            except Exception:  # leases and the mesh's deletion reclaim what is left
                pass

    def drain_frees(self, timeout: float = 30.0) -> None:
        """Waits until what *_later queued so far is sent (and, on the op stream, answered)."""
        done = threading.Event()
        self._later.put(done)
        done.wait(timeout)
        if self.op_stream is not None:
            self.op_stream.flush(timeout)

    def close(self) -> None:
        """Sends what is queued, then stops the sending thread and closes the op stream."""
        self.drain_frees()
        self._later.put(None)
        self._sender.join(timeout=5)
        if self.op_stream is not None:
            self.op_stream.close()

    def redistribute(self, name: str, placements: Sequence[Any], mesh: str, output: str,
                     explain: bool, planner: int) -> Any:
        request = tensor_pb2.RedistributeRequest(name=name, placements=list(placements),
                                                 mesh=mesh, output=output, explain=explain,
                                                 planner=planner)
        # A move across meshes streams the tensor through the coordinator.
        timeout = self.transfer_timeout if mesh else None
        return self.unary(self.dtensors.Redistribute, request, timeout)

    def save_tensor(self, name: str, path: str) -> Any:
        request = tensor_pb2.SaveTensorRequest(name=name, path=path)
        return self.unary(self.dtensors.SaveTensor, request, self.transfer_timeout)

    def load_tensor(self, path: str, mesh: str, placements: Sequence[Any], output: str,
                    tensor: str) -> Any:
        request = tensor_pb2.LoadTensorRequest(path=path, mesh=mesh, placements=list(placements),
                                               output=output, tensor=tensor)
        return self.unary(self.dtensors.LoadTensor, request)

    def run_op(self, op: Any, inputs: Sequence[str], output: str = "", mesh: str = "",
               placements: Sequence[Any] = (), outputs: Sequence[str] = ()) -> Any:
        """RunOp; ``mesh`` and ``placements``: a factory's output layout, ``outputs``: the names
        of an op's several outputs (OpRequest's; empty: the coordinator picks them)."""
        return self.unary(self.dtensors.RunOp,
                          tensor_pb2.OpRequest(op=op, inputs=list(inputs), output=output,
                                               mesh=mesh, placements=list(placements),
                                               outputs=list(outputs)))

    def manual_seed(self, seed: int) -> None:
        """Seeds this session's random stream on the coordinator (ManualSeed)."""
        self.unary(self.dtensors.ManualSeed,
                   tensor_pb2.ManualSeedRequest(seed=int(seed) & (2**64 - 1)))

    def list_ops(self, filter: str = "") -> Sequence[Any]:  # noqa: A002 - ListOps's name
        """The op registry (OpInfo messages) whose names contain ``filter``."""
        return self.unary(self.dtensors.ListOps, tensor_pb2.ListOpsRequest(filter=filter),
                          settle=False).ops

    def synchronize(self, names: Sequence[str], timeout: Optional[float] = None) -> None:
        self.unary(self.dtensors.Synchronize, tensor_pb2.SynchronizeRequest(names=list(names)),
                   timeout or self.transfer_timeout)

    # -- local tensors and collectives ---------------------------------------------------------

    def put_local(self, mesh: str, rank: int, name: str, buffer: HostBuffer) -> int:
        def requests() -> Iterator[Any]:
            first = True
            for piece in chunks(buffer.bytes_view()):
                chunk = collective_pb2.PutLocalChunk(data=piece.tobytes())
                if first:
                    chunk.mesh, chunk.rank, chunk.tensor = mesh, rank, name
                    chunk.dtype = buffer.dtype.number
                    chunk.shape.CopyFrom(shape_proto(buffer.shape))
                    first = False
                yield chunk

        return self.stream_in(self.collectives.PutLocal, requests()).bytes

    def get_local(self, mesh: str, rank: int, name: str) -> Tuple[_dt.DType, Any]:
        request = collective_pb2.GetLocalRequest(mesh=mesh, rank=rank, tensor=name)
        return self.receive_tensor(self.stream_out(self.collectives.GetLocal, request),
                                   f"download of '{name}' from rank {rank}")

    def delete_local(self, mesh: str, name: str) -> None:
        self.unary(self.collectives.DeleteTensor,
                   collective_pb2.DeleteTensorRequest(mesh=mesh, tensor=name))

    def run_collective(self, request: Any) -> Any:
        return self.unary(self.collectives.RunCollective, request, self.transfer_timeout)

    def wait_collectives(self, mesh: str, works: Sequence[int], timeout: Optional[float]
                         ) -> Sequence[Any]:
        reply = self.unary(self.collectives.WaitCollectives,
                           collective_pb2.WaitCollectivesRequest(mesh=mesh, works=list(works)),
                           timeout or self.transfer_timeout)
        if len(reply.results) != len(works):
            raise DataLoss(f"WaitCollectives answered {len(reply.results)} of {len(works)} works")
        return reply.results

    # -- modules ---------------------------------------------------------------------------------

    def load_module(self, header: Any, weights: Optional[Any], data: Iterable[bytes]) -> Any:
        """LoadModule: the header (and the weights' header), then the weights' bytes."""

        def requests() -> Iterator[Any]:
            first = module_pb2.LoadModuleChunk(header=header)
            if weights is not None:
                first.weights.CopyFrom(weights)
            yield first
            for piece in data:
                yield module_pb2.LoadModuleChunk(data=piece)

        return self.stream_in(self.modules.LoadModule, requests())

    def module_call(self, method: str, request: Any, transfer: bool = False) -> Any:
        """A unary ModuleService call by name; ``transfer`` for those that move tensors."""
        return self.unary(getattr(self.modules, method), request,
                          self.transfer_timeout if transfer else None)

    def save_module(self, name: str, gradients: bool) -> List[Tuple[str, _dt.DType, Any]]:
        """state_dict(): every tensor whole, in order, as (name, dtype, array)."""
        out: List[Tuple[str, _dt.DType, Any]] = []
        tensor: Optional[Assembler] = None
        current = ""

        def finish() -> None:
            if tensor is not None:
                out.append((current, tensor.dtype, tensor.finish()))

        request = module_pb2.SaveModuleRequest(name=name, gradients=gradients)
        chunks_ = self.stream_out(self.modules.SaveModule, request)
        try:
            for chunk in chunks_:
                if chunk.name:
                    finish()
                    current = chunk.name
                    tensor = Assembler(f"parameter '{current}' of module '{name}'")
                    tensor.start(_dt.from_number(chunk.data.dtype), chunk.data.shape.dims)
                elif tensor is None:
                    raise DataLoss("the state_dict stream began without a tensor's name")
                tensor.append(chunk.data.data)
        finally:
            chunks_.close()  # ends the call now, not in a finalizer
        finish()
        return out

