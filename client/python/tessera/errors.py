"""Tessera's exceptions: one class per gRPC status code, each carrying the code and the service's
message, and subclassing the built-in exception a Python caller would catch for that kind of
failure (``InvalidArgument`` is a ``ValueError``, ``NotFound`` a ``KeyError``, ...)."""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, Optional, Type

import grpc

__all__ = [
    "TesseraError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "UnsupportedOp",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "error_for",
    "translate_errors",
]


class TesseraError(Exception):
    """A call refused or failed by the service (or by the client before sending it).

    ``code`` is the ``grpc.StatusCode``; ``message`` the service's message, which names the value
    that was wrong (a tensor, a mesh, a placement)."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:  # KeyError would quote the message
        return f"{self.code.name}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class Cancelled(TesseraError):
    """The call was cancelled (CANCELLED)."""

    code = grpc.StatusCode.CANCELLED


class Unknown(TesseraError):
    """UNKNOWN."""

    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(TesseraError, ValueError):
    """A bad argument: placement, shape, dtype, spec, plan (INVALID_ARGUMENT)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(TesseraError, TimeoutError):
    """The call's deadline passed (DEADLINE_EXCEEDED)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(TesseraError, KeyError):
    """No tensor, mesh, module or model of that name (NOT_FOUND)."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TesseraError):
    """A tensor, mesh or module of that name exists (ALREADY_EXISTS)."""

    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(TesseraError, PermissionError):
    """Another client's tensor (PERMISSION_DENIED)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(TesseraError):
    """A worker's memory budget, or the service's queue, would be exceeded (RESOURCE_EXHAUSTED)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(TesseraError, RuntimeError):
    """The state does not allow the call: a mesh that cannot run commands, ranks that disagree on a
    collective's input (FAILED_PRECONDITION)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(TesseraError):
    """ABORTED."""

    code = grpc.StatusCode.ABORTED


class OutOfRange(TesseraError, IndexError):
    """OUT_OF_RANGE."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(TesseraError, NotImplementedError):
    """What the service (or this client) does not do (UNIMPLEMENTED)."""

    code = grpc.StatusCode.UNIMPLEMENTED


class UnsupportedOp(Unimplemented, AttributeError):
    """A torch name (``tessera.softmax``, ``DTensor.view``) the service has no op for; an
    AttributeError too, so that ``hasattr`` says False."""


class Internal(TesseraError):
    """INTERNAL."""

    code = grpc.StatusCode.INTERNAL


class Unavailable(TesseraError, ConnectionError):
    """The coordinator or a worker cannot be reached, or a mesh is broken (UNAVAILABLE)."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(TesseraError):
    """A stream ended with bytes missing or extra (DATA_LOSS)."""

    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(TesseraError):
    """UNAUTHENTICATED."""

    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[TesseraError]] = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}
_BY_NUMBER: Dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


def error_for(code, message: str) -> TesseraError:
    """The exception for a status code (a ``grpc.StatusCode`` or its number) and message."""
    if not isinstance(code, grpc.StatusCode):
        code = _BY_NUMBER.get(int(code), grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, TesseraError)(message, code)


def from_rpc_error(error: grpc.RpcError) -> TesseraError:
    """The exception for a failed gRPC call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return error_for(code or grpc.StatusCode.UNKNOWN, details or "")


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Raises a gRPC error inside the block as its Tessera exception."""
    try:
        yield
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None
