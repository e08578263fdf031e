"""numpy arrays and CPU torch tensors to and from the bytes Tessera's streams carry (row-major,
little-endian), with no copy beyond the one into each wire message where the buffer protocol
allows; and the chunking of those bytes (1 MiB per message, as the C++ client)."""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Tuple

import numpy as np

from . import dtypes as _dt
from .errors import InvalidArgument

__all__ = ["CHUNK_BYTES", "HostBuffer", "as_buffer", "chunks", "Assembler", "is_torch_tensor",
           "wrap_output"]

#: Bytes per message of every tensor stream: the coordinator's windows line up with them.
CHUNK_BYTES = 1 << 20


def is_torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch.Tensor (without importing torch)."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


class HostBuffer:
    """A tensor's dtype, shape and bytes as the wire wants them, viewing the caller's memory
    where it already is contiguous and little-endian. ``kind`` is "torch" or "numpy"."""

    __slots__ = ("dtype", "shape", "array", "kind")

    def __init__(self, dtype: _dt.DType, shape: Tuple[int, ...], array: np.ndarray, kind: str):
        self.dtype = dtype
        self.shape = shape
        self.array = array  # C-contiguous, little-endian storage dtype
        self.kind = kind

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def bytes_view(self) -> memoryview:
        """The bytes, flat, without a copy."""
        return memoryview(self.array.reshape(-1).view(np.uint8))

    def tobytes(self) -> bytes:
        return self.array.tobytes()


def as_buffer(value: Any, dtype: Any = None) -> HostBuffer:
    """A numpy array, CPU torch tensor, or anything numpy.asarray takes, as a HostBuffer.

    With ``dtype`` the values are converted to it first. A tensor on another device is copied to
    the CPU. Raises InvalidArgument for an element type Tessera does not hold."""
    kind = "numpy"
    if is_torch_tensor(value):
        import torch

        kind = "torch"
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if dtype is not None:
            t = t.to(_to_dtype(dtype).torch)
        try:
            d = _dt.as_dtype(t.dtype)
        except ValueError as error:
            raise InvalidArgument(str(error)) from None
        t = t.contiguous()
        if d is _dt.bfloat16:
            array = t.view(torch.int16).numpy().view(np.uint16)
        else:
            array = t.numpy()
        return HostBuffer(d, tuple(t.shape), array, kind)
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    if dtype is not None:
        d = _to_dtype(dtype)
        if not (_is_tessera_dtype(value.dtype) and _dt.as_dtype(value.dtype) is d):
            if d is _dt.bfloat16 and _dt.ml_dtypes_bfloat16 is None:
                value = _dt.float_to_bfloat16_bits(value)  # raw bits, converted by hand
                return HostBuffer(d, tuple(value.shape), np.ascontiguousarray(value), kind)
            value = value.astype(d.numpy)
    try:
        d = _dt.as_dtype(value.dtype)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None
    storage = d.storage
    array = value.view(storage) if value.dtype.itemsize == storage.itemsize and \
        value.dtype.byteorder in "=<|" else value.astype(storage)
    array = np.ascontiguousarray(array)
    return HostBuffer(d, tuple(int(s) for s in value.shape), array, kind)


def _is_tessera_dtype(npd: np.dtype) -> bool:
    try:
        _dt.as_dtype(npd)
        return True
    except ValueError:
        return False


def _to_dtype(dtype: Any) -> _dt.DType:
    try:
        return _dt.as_dtype(dtype)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None


def chunks(view: memoryview, size: int = CHUNK_BYTES) -> Iterator[memoryview]:
    """``view`` in pieces of at most ``size`` bytes; one empty piece for no bytes."""
    n = len(view)
    if n == 0:
        yield view
        return
    for at in range(0, n, size):
        yield view[at:at + size]


class Assembler:
    """Receives a tensor's bytes in pieces straight into its final array: the dtype and shape
    come first, and neither more nor fewer bytes than they give are accepted."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.dtype: Optional[_dt.DType] = None
        self.array: Optional[np.ndarray] = None
        self._flat: Optional[np.ndarray] = None
        self.received = 0

    @property
    def started(self) -> bool:
        return self.array is not None

    @property
    def expected(self) -> int:
        return 0 if self.array is None else int(self.array.nbytes)

    def start(self, dtype: _dt.DType, shape: Sequence[int]) -> None:
        self.dtype = dtype
        self.array = np.empty(tuple(int(s) for s in shape), dtype=dtype.storage)
        self._flat = self.array.reshape(-1).view(np.uint8)

    def append(self, data: bytes) -> None:
        from .errors import DataLoss

        n = len(data)
        if self.received + n > self.expected:
            raise DataLoss(f"{self.what}: more bytes than its shape holds ({self.received + n} "
                           f"> {self.expected})")
        if n:
            self._flat[self.received:self.received + n] = np.frombuffer(data, dtype=np.uint8)
        self.received += n

    def finish(self) -> np.ndarray:
        from .errors import DataLoss

        if self.array is None:
            raise DataLoss(f"{self.what}: the stream carried no tensor")
        if self.received != self.expected:
            raise DataLoss(f"{self.what}: {self.received} of {self.expected} bytes arrived")
        return self.array


def wrap_output(array: np.ndarray, dtype: _dt.DType, kind: str = "numpy") -> Any:
    """A received array as the caller wants it: numpy (bfloat16 as ml_dtypes' type when
    installed, else torch's when ``kind`` is torch, else raw uint16) or a torch tensor sharing
    its memory."""
    if kind == "torch":
        import torch

        if dtype is _dt.bfloat16:
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)
    if kind != "numpy":
        raise InvalidArgument(f"unknown output kind '{kind}'; expected 'numpy' or 'torch'")
    if dtype is _dt.bfloat16 and _dt.ml_dtypes_bfloat16 is not None:
        return array.view(_dt.ml_dtypes_bfloat16)
    return array
