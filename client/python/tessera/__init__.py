"""Tessera's Python client: PyTorch's DTensor and tensor-parallel API on a Tessera cluster.

    import numpy as np, tessera
    from tessera import Shard, Replicate

    tessera.connect("127.0.0.1:50051")
    mesh = tessera.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    x = tessera.distribute_tensor(np.ones((8, 6), np.float32), mesh, [Shard(0), Replicate()])
    w = tessera.randn(6, 4, device_mesh=mesh, placements=[Replicate(), Shard(1)], seed=1)
    y = (x @ w).relu()                 # runs on the workers; returns at once
    z = tessera.softmax(y[:, :2], -1)  # torch's names: tessera.ops.aten.<name> calls any op
    print(y.placements, z.full_tensor())

Names follow ``torch.distributed.tensor`` (DTensor, distribute_tensor, the factories), torch's
functions and Tensor methods (``tessera.cat``, ``x.view``, ``x[1:, None]``; ``torch.*`` on a
DTensor too, by ``__torch_function__``), ``tessera.ops.aten`` (every op of the service's
registry by its ATen name), ``tessera.nn.functional``,
``torch.distributed.device_mesh`` (init_device_mesh), ``torch.distributed.tensor.parallel``
(parallelize_module and the styles) and ``torch.distributed`` (``tessera.distributed``'s
collectives). Every call has a deadline and raises a :class:`TesseraError` subclass carrying the
gRPC code and the service's message."""

from . import distributed, functions, nn, ops, return_types
from .dtensor import (DTensor, InputRedistribution, RedistributePlan, RedistributeStep, arange,
                      call_factory, distribute_tensor, empty, eye, full, get_tensor, load,
                      manual_seed, ones, rand, rand_like, randint, randint_like, randn,
                      randn_like, save, zeros)
from .dtypes import (DType, all_dtypes, bfloat16, bool, float16, float32, float64, int8, int32,
                     int64, uint8)
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                     FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                     PermissionDenied, ResourceExhausted, TesseraError, Unauthenticated,
                     Unavailable, Unimplemented, Unknown, UnsupportedOp)
from .export import Exported, export
from .functions import *  # noqa: F401,F403 - torch's functions (functions.__all__)
from .kserve import InferenceClient
from .mesh import DeviceMesh, get_device_mesh, init_device_mesh
from .module import Module, ModuleOutput, StepResult, get_module, list_modules, load_module
from .parallel import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleOutput,
                       RowwiseParallel, SequenceParallel, distribute_module, loss_parallel,
                       parallelize_module)
from .placements import Partial, Placement, Replicate, Shard
from .session import Session, connect, get_session, set_session

__version__ = "0.1.0"

__all__ = [
    "connect", "Session", "get_session", "set_session",
    "DeviceMesh", "init_device_mesh", "get_device_mesh",
    "Placement", "Shard", "Replicate", "Partial",
    "DTensor", "distribute_tensor", "get_tensor", "zeros", "ones", "full", "empty", "rand",
    "randn", "arange", "eye", "randint", "rand_like", "randn_like", "randint_like",
    "call_factory", "manual_seed", "save", "load", "RedistributePlan", "RedistributeStep", "InputRedistribution",
    "ops", "nn", "distributed", "return_types",
    "Module", "ModuleOutput", "StepResult", "load_module", "get_module", "list_modules",
    "ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
    "PrepareModuleInput", "PrepareModuleOutput", "parallelize_module", "distribute_module",
    "loss_parallel", "export", "Exported", "InferenceClient",
    "DType", "all_dtypes", "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32",
    "int64", "bool",
    "TesseraError", "InvalidArgument", "NotFound", "AlreadyExists", "PermissionDenied",
    "FailedPrecondition", "Unavailable", "DeadlineExceeded", "ResourceExhausted", "Unimplemented",
    "Internal", "DataLoss", "Cancelled", "Aborted", "OutOfRange", "Unknown", "Unauthenticated",
    "UnsupportedOp",
] + functions.__all__


def __getattr__(name: str):
    """torch's functions that the service has no op for raise UnsupportedOp (an
    AttributeError too)."""
    from .dtensor import TORCH_ONLY, unsupported

    if name in TORCH_ONLY:
        raise unsupported(f"tessera.{name}")
    raise AttributeError(f"module 'tessera' has no attribute '{name}'")
