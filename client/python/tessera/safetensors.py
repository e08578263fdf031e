"""The safetensors format, by hand (json + numpy): a little-endian u64 header size, a JSON header
naming each tensor's dtype, shape and byte range, then the bytes. Used when the ``safetensors``
package is absent, and to read a file's header without reading its tensors."""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from . import dtypes as _dt
from .errors import InvalidArgument
from .interop import HostBuffer, as_buffer, wrap_output

__all__ = ["SafetensorsEntry", "read_header", "tensor_chunks", "write", "read"]

_BY_CODE = {d.safetensors: d for d in _dt.all_dtypes}


class SafetensorsEntry(NamedTuple):
    """One tensor of a file: name, dtype, shape, and its bytes [begin, end) after the header."""

    name: str
    dtype: _dt.DType
    shape: Tuple[int, ...]
    begin: int
    end: int


def read_header(path: "os.PathLike[str] | str") -> Tuple[List[SafetensorsEntry], int]:
    """The tensors of a safetensors file in the order of their bytes, and where the bytes start."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise InvalidArgument(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (size,) = struct.unpack("<Q", head)
        if size > os.path.getsize(path) - 8:
            raise InvalidArgument(f"{path}: header size {size} is past the end of the file")
        try:
            header = json.loads(f.read(size))
        except ValueError as error:
            raise InvalidArgument(f"{path}: the header is not JSON ({error})") from None
    entries = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e.get("dtype") not in _BY_CODE:
            raise InvalidArgument(f"{path}: tensor '{name}' has dtype {e.get('dtype')!r}, which "
                                  "Tessera does not hold")
        begin, end = e["data_offsets"]
        entries.append(SafetensorsEntry(name, _BY_CODE[e["dtype"]], tuple(e["shape"]), begin, end))
    entries.sort(key=lambda e: e.begin)
    return entries, 8 + size


def tensor_chunks(path: "os.PathLike[str] | str", start: int, entry: SafetensorsEntry,
                  size: int) -> Iterator[bytes]:
    """The bytes of tensor `entry` of the file at `path` (its data from `start`), `size` at a
    time, never the whole tensor; InvalidArgument where the file is cut short."""
    with open(path, "rb") as f:
        f.seek(start + entry.begin)
        left = entry.end - entry.begin
        while left > 0:
            piece = f.read(min(size, left))
            if not piece:
                raise InvalidArgument(f"{path}: tensor '{entry.name}' is cut short")
            left -= len(piece)
            yield piece


def write(path: "os.PathLike[str] | str", tensors: Mapping[str, Any],
          metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes numpy arrays or CPU torch tensors as a safetensors file, in the mapping's order."""
    buffers: Dict[str, HostBuffer] = {name: as_buffer(t) for name, t in tensors.items()}
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, b in buffers.items():
        header[name] = {"dtype": b.dtype.safetensors, "shape": list(b.shape),
                        "data_offsets": [offset, offset + b.nbytes]}
        offset += b.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in buffers.values():
            f.write(b.bytes_view())


def read(path: "os.PathLike[str] | str", kind: str = "numpy") -> Dict[str, Any]:
    """Every tensor of a safetensors file, as numpy arrays (or torch tensors)."""
    entries, start = read_header(path)
    out: Dict[str, Any] = {}
    with open(path, "rb") as f:
        for e in entries:
            f.seek(start + e.begin)
            data = f.read(e.end - e.begin)
            array = np.frombuffer(data, dtype=e.dtype.storage).reshape(e.shape).copy()
            out[e.name] = wrap_output(array, e.dtype, kind)
    return out
