#!/usr/bin/env python3
"""PyTorch's own tensor parallelism, timed, as the peer of bench/module_bench.

Runs an MLP (Linear(d, h) -> ReLU -> Linear(h, d)) with parallelize_module (net1 ColwiseParallel,
net2 RowwiseParallel) on gloo with WORLD processes of one thread each on CPU, and prints one JSON
line: {"forward_us": median per forward, "step_us": median per training step (forward, sum
backward, SGD lr 0.25)}. Inputs are replicated, as Tessera's Forward takes a full input.

usage: torch_tp_peer.py --dim 1024 --hidden 4096 --batch 64 --world 2 --iterations 50
"""

import argparse
import json
import os
import statistics
import sys
import time


def worker(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    mesh = init_device_mesh("cpu", (args.world,))
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("net1", torch.nn.Linear(args.dim, args.hidden))
    model.add_module("relu", torch.nn.ReLU())
    model.add_module("net2", torch.nn.Linear(args.hidden, args.dim))
    model = parallelize_module(model, mesh, {"net1": ColwiseParallel(),
                                             "net2": RowwiseParallel()})
    x = torch.rand(args.batch, args.dim)
    optim = torch.optim.SGD(model.parameters(), lr=0.25)

    def timed(fn):
        for _ in range(3):
            fn()
        samples = []
        for _ in range(args.iterations):
            dist.barrier()
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e6)
        return statistics.median(samples)

    def forward():
        with torch.no_grad():
            model(x)

    def step():
        optim.zero_grad()
        model(x).sum().backward()
        optim.step()

    result = {"forward_us": timed(forward), "step_us": timed(step)}
    if rank == 0:
        queue.put(result)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--port", type=int, default=29533)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(worker, args=(args, args.port, queue), nprocs=args.world, join=True,
                       start_method="spawn")
    print(json.dumps(queue.get()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
