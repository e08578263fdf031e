"""The element types of Tessera's tensors and their numpy, torch, safetensors and KServe names.

``tessera.float32`` ... ``tessera.bool`` are :class:`DType` objects; everywhere a dtype is taken,
one of those, a numpy dtype, a torch dtype or a name ("float32", "bfloat16", "bf16") works.
bfloat16 has no numpy type of its own: arrays of it are ``ml_dtypes.bfloat16`` when ml_dtypes is
installed, else torch tensors, else raw ``uint16`` bit patterns."""

from __future__ import annotations

import builtins
from typing import Any, Dict, Optional

import numpy as np

__all__ = [
    "DType",
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int8",
    "uint8",
    "int32",
    "int64",
    "bool",
    "all_dtypes",
    "as_dtype",
    "ml_dtypes_bfloat16",
]

try:  # optional: numpy's bfloat16
    import ml_dtypes as _ml_dtypes

    ml_dtypes_bfloat16: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes_bfloat16 = None


class DType:
    """One element type: its name, wire number, size, and names in the other libraries."""

    __slots__ = ("name", "number", "itemsize", "_numpy", "safetensors", "kserve", "is_floating")

    def __init__(self, name: str, number: int, numpy: str, safetensors: str, kserve: str,
                 is_floating: builtins.bool) -> None:
        self.name = name
        self.number = number  # tessera.v1.DType
        self._numpy = np.dtype(numpy)  # bit-compatible numpy storage ('<u2' for bfloat16)
        self.itemsize = self._numpy.itemsize
        self.safetensors = safetensors
        self.kserve = kserve
        self.is_floating = is_floating

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype arrays of this type get (bfloat16: ml_dtypes', else raw uint16)."""
        if self.number == 4 and ml_dtypes_bfloat16 is not None:
            return ml_dtypes_bfloat16
        return self._numpy

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype with the same bytes (bfloat16: little-endian uint16)."""
        return self._numpy

    @property
    def torch(self) -> Any:
        """The torch dtype (imports torch)."""
        import torch

        return getattr(torch, self.name)

    def __repr__(self) -> str:
        return f"tessera.{self.name}"

    def __eq__(self, other: object) -> builtins.bool:
        if isinstance(other, DType):
            return other.number == self.number
        if other is None:  # np.dtype(None) would be float64
            return False
        try:
            return as_dtype(other).number == self.number
        except (TypeError, ValueError):
            return False

    def __hash__(self) -> int:
        return hash(self.number)


float32 = DType("float32", 1, "<f4", "F32", "FP32", True)
float64 = DType("float64", 2, "<f8", "F64", "FP64", True)
float16 = DType("float16", 3, "<f2", "F16", "FP16", True)
bfloat16 = DType("bfloat16", 4, "<u2", "BF16", "BF16", True)
int8 = DType("int8", 5, "i1", "I8", "INT8", False)
uint8 = DType("uint8", 6, "u1", "U8", "UINT8", False)
int32 = DType("int32", 7, "<i4", "I32", "INT32", False)
int64 = DType("int64", 8, "<i8", "I64", "INT64", False)
bool = DType("bool", 9, "?", "BOOL", "BOOL", False)  # noqa: A001 - torch's name

all_dtypes = (float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool)

_BY_NAME: Dict[str, DType] = {}
for _d in all_dtypes:
    for _n in (_d.name, _d.safetensors.lower(), _d.kserve.lower()):
        _BY_NAME[_n] = _d
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
                 "fp32": float32, "fp64": float64, "fp16": float16})
_BY_NUMBER = {d.number: d for d in all_dtypes}
_BY_NUMPY = {d.storage: d for d in all_dtypes if d is not bfloat16}


def from_number(number: int) -> DType:
    """The DType of a tessera.v1.DType value."""
    try:
        return _BY_NUMBER[int(number)]
    except KeyError:
        raise ValueError(f"unknown tessera dtype number {number}") from None


def as_dtype(value: Any) -> DType:
    """``value`` (a DType, numpy dtype or type, torch dtype, or name) as a DType.

    Raises ``ValueError`` naming a type Tessera does not hold (complex, uint16 ...)."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        d = _BY_NAME.get(value.lower().replace("torch.", ""))
        if d is None:
            raise ValueError(f"unknown dtype '{value}'; expected one of "
                             f"{', '.join(d.name for d in all_dtypes)}")
        return d
    module = type(value).__module__
    if module.startswith("torch"):
        name = str(value).replace("torch.", "")
        if name in _BY_NAME and name == _BY_NAME[name].name:
            return _BY_NAME[name]
        raise ValueError(f"torch dtype {value} has no Tessera dtype")
    if value is builtins.bool:
        return bool
    if value is builtins.float:
        return float32
    if value is builtins.int:
        return int64
    try:
        npd = np.dtype(value)
    except TypeError:
        raise ValueError(f"{value!r} is not a dtype") from None
    if ml_dtypes_bfloat16 is not None and npd == ml_dtypes_bfloat16:
        return bfloat16
    d = _BY_NUMPY.get(npd.newbyteorder("<") if npd.byteorder == ">" else npd)
    if d is None:
        raise ValueError(f"numpy dtype {npd} has no Tessera dtype; expected one of "
                         f"{', '.join(d.name for d in all_dtypes)}")
    return d


def float_to_bfloat16_bits(values: Any) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of ``values``, rounded to nearest even as torch does."""
    f = np.asarray(values, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bfloat16_bits_to_float32(bits: Any) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
