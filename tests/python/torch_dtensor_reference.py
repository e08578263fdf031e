"""torch's own DTensor on gloo, for test_client_torch.py: 4 processes on a (2, 2) mesh ("dp",
"tp") compute every case the test sends through Tessera and write each rank's local tensors and
placements to OUT/rank<R>.npz.

    python3 torch_dtensor_reference.py OUT
"""

import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

# Placements by the test's spelling.
PLACEMENTS = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}
DISTRIBUTE = [("S0", "S1"), ("S0", "S0"), ("S1", "S1"), ("R", "S0"), ("S1", "R"), ("R", "R")]
REDISTRIBUTE = [(("S0", "S1"), ("R", "S0")), (("S0", "S0"), ("S1", "R")), (("S1", "S1"), ("S0", "S1")),
                (("R", "S0"), ("S0", "S0"))]
MM = [("S0", "R"), ("R", "S1"), ("S1", "S0"), ("R", "R")]


def data(shape, seed):
    return torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32))


def case_name(*parts):
    return "_".join("-".join(p) if isinstance(p, tuple) else p for p in parts)


def run(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    world = init_device_mesh("cpu", (4,), mesh_dim_names=("world",))
    result = {}
    x = data((5, 7), 1)
    for p in DISTRIBUTE:
        t = distribute_tensor(x, mesh, [PLACEMENTS[q] for q in p])
        result[case_name("distribute", p)] = t.to_local().numpy()
    for src, dst in REDISTRIBUTE:
        t = distribute_tensor(x, mesh, [PLACEMENTS[q] for q in src])
        result[case_name("redistribute", src, dst)] = t.redistribute(mesh, [PLACEMENTS[q] for q in dst]).to_local().numpy()
    a, b = data((9, 10), 2), data((10, 6), 3)
    for pa, pb in MM:
        y = torch.mm(distribute_tensor(a, world, [PLACEMENTS[pa]]), distribute_tensor(b, world, [PLACEMENTS[pb]]))
        result[case_name("mm", pa, pb)] = y.to_local().numpy()
        result[case_name("mm", pa, pb) + "_placement"] = np.array(str(y.placements[0]))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 12))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(data(tuple(p.shape), 10 + i))
    inp = data((8, 10), 20)
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    for name, p in model.named_parameters():
        result["param_" + name] = p.to_local().detach().numpy()
    model(inp).sum().backward()
    for name, p in model.named_parameters():
        result["grad_" + name] = p.grad.to_local().numpy()
    result["forward"] = model(inp).detach().numpy()
    np.savez(os.path.join(out, f"rank{rank}.npz"), **result)
    dist.barrier()
    # Gloo's threads sometimes abort the process as its destructors run at exit ("terminate
    # called without an active exception"); everything is written, so leave without them.
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(run, args=(free_port(), sys.argv[1]), nprocs=4, join=True)
