"""torch's own DTensor on every case of op_peer_cases.py, for test_client_ops_torch.py: one process
simulating 4 ranks (LocalTensorMode on the fake process group), each case's inputs distributed as
the case says, the op called through torch.ops.aten, and each output's placements (as repr gives
them) and full tensor written to OUT.npz (keys "<case>/<k>" and "<case>/<k>/placements"; a case
torch's DTensor refuses gets "<case>/error"), with the same call on whole tensors in one process
("<case>/<k>/single").

    python3 torch_op_reference.py OUT.npz
"""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_peer_cases import CASES, MESHES, arguments, data  # noqa: E402


def placement(p):
    return Replicate() if p == "R" else Partial() if p == "P" else Shard(int(p[1:]))


def distribute(x, mesh, placements):
    """x laid out as `placements`; a Partial made from Shard(0) (torch redistributes only a Shard to
    Partial, and distributes none)."""
    first = [Shard(0) if p == "P" else placement(p) for p in placements]
    t = distribute_tensor(x, mesh, first)
    return t.redistribute(mesh, [placement(p) for p in placements]) if "P" in placements else t


def call(case, inputs):
    """The case's op on `inputs` (tensors or DTensors), its outputs as a tuple."""
    base, _, overload = case.op.partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default")
    args, kwargs = arguments(case, inputs)
    outs = op(*args, **kwargs)
    return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)


def run(out_path):
    result = {}
    for case in CASES:
        whole = [torch.from_numpy(data(inp, 100 * i + 1)) for i, inp in enumerate(case.inputs)]
        for k, o in enumerate(call(case, whole)):
            result[f"{case.name}/{k}/single"] = o.numpy()
    dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
    with LocalTensorMode(4):
        meshes = {name: init_device_mesh("cpu", shape) for name, shape in MESHES.items()}
        for case in CASES:
            mesh = meshes[case.mesh]
            inputs = [distribute(torch.from_numpy(data(inp, 100 * i + 1)), mesh, inp.placements)
                      for i, inp in enumerate(case.inputs)]

            try:
                outs = call(case, inputs)
            except Exception as e:  # noqa: BLE001 - recorded for the test to report
                result[f"{case.name}/error"] = np.array(f"{type(e).__name__}: {e}"[:500])
                continue
            for k, o in enumerate(outs):
                result[f"{case.name}/{k}"] = o.full_tensor().numpy()
                result[f"{case.name}/{k}/placements"] = np.array(repr(tuple(o.placements)))
    np.savez(out_path, **result)


if __name__ == "__main__":
    run(sys.argv[1])
