"""The direct path. distribute_tensor: the coordinator plans the upload (each block's worker,
local shape, offset and a grant it signed), the client streams every block straight to its worker
(``tessera.v1.Worker/Upload`` with the grant) and commits the workers' receipts. full_tensor and
to_local: the coordinator plans the read (each block's worker, offset and a read grant), the client
downloads every block straight from its worker (``tessera.v1.Worker/Download``) and assembles the
answer. The order of each worker's commands stays the coordinator's; see docs/dtensors.md, "The direct
path"."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence

import grpc
import numpy as np

from .errors import (PermissionDenied, TesseraError, Unauthenticated, Unavailable, Unimplemented,
                     translate_errors)
from . import dtypes as _dt
from .interop import CHUNK_BYTES, Assembler, HostBuffer
from .v1 import dtensor_pb2, worker_pb2, worker_pb2_grpc

__all__ = ["DIRECT_DATA_MODES", "WorkerChannels", "RelayMayHelp", "distribute_direct",
           "from_local_direct", "upload_direct", "download_direct"]

DIRECT_DATA_MODES = ("auto", "on", "off")
PARALLEL_BLOCKS = 16
REACH_TIMEOUT = 2.0  # seconds "auto" waits for a worker's connection before it relays
# The metadata entry that carries a direct upload's grant (a serialized DirectGrant), which the
# worker checks before it reads the stream.
GRANT_METADATA_KEY = "x-tessera-grant-bin"
RETRY_AFTER = 30.0  # seconds an unreachable worker address is relayed around


class RelayMayHelp(Exception):
    """The direct path failed where the relay may succeed (``cause`` says why)."""

    def __init__(self, cause: TesseraError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class WorkerChannels:
    """A session's channels straight to workers, one per address; an address that could not be
    reached is remembered for RETRY_AFTER seconds. Thread-safe."""

    def __init__(self, credentials: Optional[grpc.ChannelCredentials],
                 options: List[Any]) -> None:
        self._credentials = credentials
        self._options = options
        self._lock = threading.Lock()
        self._channels: Dict[str, grpc.Channel] = {}
        self._unreachable_since: Dict[str, float] = {}

    def stub(self, address: str, timeout: float) -> Any:
        """A Worker stub on a channel to ``address`` connected within ``timeout`` seconds; raises
        Unavailable naming the address otherwise."""
        with self._lock:
            since = self._unreachable_since.get(address)
            if since is not None and time.monotonic() - since < RETRY_AFTER:
                raise Unavailable(f"worker at {address} was unreachable from this client")
            self._unreachable_since.pop(address, None)
            channel = self._channels.get(address)
            if channel is None:
                channel = (grpc.insecure_channel(address, options=self._options)
                           if self._credentials is None else
                           grpc.secure_channel(address, self._credentials, options=self._options))
                self._channels[address] = channel
        ready = grpc.channel_ready_future(channel)
        try:
            ready.result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.mark_unreachable(address)
            raise Unavailable(f"cannot reach worker at {address} within {timeout:g} s") from None
        finally:
            ready.cancel()  # stops watching the channel
        return worker_pb2_grpc.WorkerStub(channel)

    def mark_unreachable(self, address: str) -> None:
        with self._lock:
            self._unreachable_since[address] = time.monotonic()

    def close(self) -> None:
        """Forgets the channels; each closes once its last call has ended (closing one now
        would break gRPC's watch of its connectivity, which ends on its own)."""
        with self._lock:
            self._channels.clear()


def _block_chunks(array: np.ndarray, route: Any) -> Any:
    """The block ``route`` names out of the whole ``array``, as byte pieces of about CHUNK_BYTES
    in the block's row-major order (a few rows at a time: never the whole block at once)."""
    shape = tuple(route.grant.shape.dims)
    index = tuple(slice(o, o + s) for o, s in zip(route.offset, shape))
    block = array[index] if shape else array
    if block.size == 0 or block.ndim == 0:
        yield np.ascontiguousarray(block).tobytes()
        return
    row_bytes = max(1, block.nbytes // block.shape[0])
    rows = max(1, CHUNK_BYTES // row_bytes)
    for at in range(0, block.shape[0], rows):
        piece = np.ascontiguousarray(block[at:at + rows])
        view = memoryview(piece.reshape(-1).view(np.uint8))
        for start in range(0, len(view), CHUNK_BYTES):
            yield view[start:start + CHUNK_BYTES]


def _send_block(stub: Any, route: Any, array: np.ndarray, timeout: float,
                sent: Callable[[int], None]) -> bytes:
    """Streams one block to its worker; its receipt."""
    grant = route.grant

    def requests() -> Any:
        first = True
        for piece in _block_chunks(array, route):
            chunk = worker_pb2.TensorChunk(data=bytes(piece))
            if first:
                chunk.tensor = grant.tensor
                chunk.dtype = grant.dtype
                chunk.shape.CopyFrom(grant.shape)
                chunk.sequence = grant.sequence
                chunk.incarnation = grant.incarnation
                first = False
            yield chunk
            sent(len(piece))

    try:
        with translate_errors():
            # The worker checks the grant, carried in the call's metadata, before it reads.
            return stub.Upload(requests(), timeout=timeout,
                               metadata=((GRANT_METADATA_KEY, grant.SerializeToString()),)).receipt
    except TesseraError as error:
        error.message = (f"direct upload to worker {grant.worker_id} at {route.address}: "
                         f"{error.message}")
        raise


def distribute_direct(transport: Any, channels: WorkerChannels, buffer: HostBuffer, header: Any,
                      sent: Callable[[int], None]) -> Any:
    """distribute_tensor: plans, streams and commits; the TensorInfo (as upload_direct)."""
    request = dtensor_pb2.PlanUploadRequest(
        header=header, transfer_timeout_ms=int(transport.transfer_timeout * 1000))
    return upload_direct(transport, channels, request, [buffer.array.reshape(buffer.shape)], sent)


def from_local_direct(transport: Any, channels: WorkerChannels, buffers: Sequence[HostBuffer],
                      header: Any, sent: Callable[[int], None]) -> Any:
    """DTensor.from_local: each rank's local tensor whole to its worker; the TensorInfo (as
    upload_direct)."""
    request = dtensor_pb2.PlanUploadRequest(
        from_local=header, transfer_timeout_ms=int(transport.transfer_timeout * 1000))
    for b in buffers:
        request.local_shapes.add().dims.extend(int(s) for s in b.shape)
    return upload_direct(transport, channels, request,
                         [b.array.reshape(b.shape) for b in buffers], sent)


def upload_direct(transport: Any, channels: WorkerChannels, request: Any,
                  arrays: Sequence[np.ndarray], sent: Callable[[int], None]) -> Any:
    """Plans the upload ``request`` (a PlanUploadRequest), streams every block and commits; the
    TensorInfo. ``arrays``: the full tensor, or (from_local) every rank's local tensor in rank
    order. Raises RelayMayHelp when the relay may succeed where this failed (the plan is aborted
    first), else the call's error."""
    whole_locals = request.HasField("from_local")
    try:
        plan = transport.unary(transport.dtensors.PlanUpload, request)
    except Unimplemented as error:
        raise RelayMayHelp(error) from None
    try:
        stubs = [channels.stub(route.address, REACH_TIMEOUT) for route in plan.routes]
        lock = threading.Lock()

        def locked_sent(n: int) -> None:
            with lock:
                sent(n)

        workers = max(1, min(PARALLEL_BLOCKS, len(plan.routes)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-upload") as pool:
            futures = [pool.submit(_send_block, stub, route,
                                   arrays[route.position if whole_locals else 0],
                                   transport.transfer_timeout, locked_sent)
                       for stub, route in zip(stubs, plan.routes)]
            receipts = []
            for route, future in zip(plan.routes, futures):
                try:
                    receipts.append(future.result())
                except Unavailable:
                    channels.mark_unreachable(route.address)
                    raise
    except (Unavailable, PermissionDenied, Unauthenticated, Unimplemented) as error:
        _abort(transport, plan.upload_id)
        raise RelayMayHelp(error) from None
    except BaseException:
        _abort(transport, plan.upload_id)
        raise
    return transport.unary(transport.dtensors.CommitUpload, dtensor_pb2.CommitUploadRequest(
        upload_id=plan.upload_id, receipts=receipts))


def _abort(transport: Any, upload_id: str) -> None:
    """Drops the plan on the coordinator (else it expires on its own)."""
    try:
        transport.unary(transport.dtensors.CommitUpload,
                        dtensor_pb2.CommitUploadRequest(upload_id=upload_id, abort=True),
                        settle=False)
    except TesseraError:
        pass


def _receive_block(stub: Any, route: Any, out: np.ndarray, timeout: float,
                   received: Callable[[int], None]) -> None:
    """Downloads one block from its worker into its place in ``out``."""
    grant = route.grant
    what = f"direct download from worker {grant.worker_id} at {route.address}"
    block = Assembler(what)
    block.start(_dt.from_number(grant.dtype), grant.shape.dims)
    request = worker_pb2.DownloadRequest(tensor=grant.tensor, sequence=grant.sequence,
                                         incarnation=grant.incarnation, grant=grant)
    try:
        with translate_errors():
            for chunk in stub.Download(request, timeout=timeout):
                block.append(chunk.data)
                received(len(chunk.data))
    except TesseraError as error:
        error.message = f"{what}: {error.message}"
        raise
    array = block.finish()
    index = tuple(slice(o, o + s) for o, s in zip(route.offset, array.shape))
    if out.ndim == 0:
        out[...] = array
    else:
        out[index] = array


def download_direct(transport: Any, channels: WorkerChannels, request: Any,
                    received: Callable[[int, int], None]) -> Any:
    """Plans the read ``request`` (a PlanDownloadRequest) and downloads every block; (dtype,
    numpy array). ``received(n, total)`` counts the bytes. Raises RelayMayHelp when the relay may
    succeed where this failed (the plan's reads are released first), else the call's error."""
    try:
        plan = transport.unary(transport.dtensors.PlanDownload, request)
    except Unimplemented as error:
        raise RelayMayHelp(error) from None
    dtype = _dt.from_number(plan.dtype)
    out = np.empty(tuple(int(s) for s in plan.shape.dims), dtype=dtype.storage)
    try:
        stubs = [channels.stub(route.address, REACH_TIMEOUT) for route in plan.routes]
        lock = threading.Lock()

        def locked_received(n: int) -> None:
            with lock:
                received(n, int(out.nbytes))

        workers = max(1, min(PARALLEL_BLOCKS, len(plan.routes)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-read") as pool:
            futures = [pool.submit(_receive_block, stub, route, out, transport.transfer_timeout,
                                   locked_received)
                       for stub, route in zip(stubs, plan.routes)]
            for route, future in zip(plan.routes, futures):
                try:
                    future.result()
                except Unavailable:
                    channels.mark_unreachable(route.address)
                    raise
    except (Unavailable, PermissionDenied, Unauthenticated, Unimplemented) as error:
        _release(transport, plan.download_id)
        raise RelayMayHelp(error) from None
    except BaseException:
        _release(transport, plan.download_id)
        raise
    return dtype, out


def _release(transport: Any, download_id: str) -> None:
    """Gives the planned read up on the coordinator (else its reads are released at expiry)."""
    try:
        transport.unary(transport.dtensors.ReleaseDownload,
                        dtensor_pb2.ReleaseDownloadRequest(download_id=download_id), settle=False)
    except TesseraError:
        pass
