#!/usr/bin/env python3
"""torch DTensor (gloo backend) peer of bench/dtensor_bench.

Starts --size processes of itself (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment,
as torchrun would set them), each on init_device_mesh("cpu", (size,)) with one intra-op thread,
and times what dtensor_bench times through the service:

  distribute_tensor of --transfer_bytes float32 as Shard(0) (src_data_rank 0), and full_tensor;
  a + b of two --tiny_elements float32 Shard(0) DTensors: the call alone, the call followed by a
  dist.barrier() (done on every rank), and --pipelined_ops adds back to back then one barrier;
  dtensor_bench's 20-op program (the same ATen ops on the same layouts), one then a barrier, and
  --program_iterations back to back then one barrier;
  redistribute Shard(0) -> Replicate of --redistribute_bytes float32.

Every timed call starts after a barrier (except the per-op add loop, which times each call) and its
time is the slowest rank's. Rank 0 writes one flat JSON object of numbers (microseconds, ops/s) to
--out and the torch version to stderr.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    """Runs --size copies of this script as ranks and returns the first failing exit code."""
    env = dict(os.environ, WORLD_SIZE=str(args.size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable] + sys.argv, env=dict(env, RANK=str(r)))
             for r in range(args.size)]
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


def rank_main(args):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    torch.set_num_threads(1)  # the workers of a 2-core machine
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))

    def slowest(times_us):
        t = torch.tensor(times_us, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def timed(call, iterations, warmup):
        """Slowest-rank microseconds of `iterations` calls, each after a barrier."""
        for _ in range(warmup):
            call()
        times = []
        for _ in range(iterations):
            dist.barrier()
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e6)
        return slowest(times)

    out = {}
    big = torch.ones(args.transfer_bytes // 4, dtype=torch.float32)
    holder = {}

    def distribute():
        holder["dt"] = distribute_tensor(big, mesh, [Shard(0)], src_data_rank=0)

    t = timed(distribute, args.transfer_iterations, 1)
    out["distribute_us"] = statistics.median(t)
    t = timed(lambda: holder["dt"].full_tensor(), args.transfer_iterations, 1)
    out["full_tensor_us"] = statistics.median(t)
    del holder["dt"], big

    a = distribute_tensor(torch.ones(args.tiny_elements), mesh, [Shard(0)])
    b = distribute_tensor(torch.ones(args.tiny_elements), mesh, [Shard(0)])
    for _ in range(args.warmup):
        c = a + b
    dist.barrier()
    call_us, sync_us = [], []
    for _ in range(args.latency_iterations):
        start = time.perf_counter()
        c = a + b
        call_us.append((time.perf_counter() - start) * 1e6)
    dist.barrier()
    for _ in range(args.latency_iterations):
        start = time.perf_counter()
        c = a + b
        dist.barrier()
        sync_us.append((time.perf_counter() - start) * 1e6)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.pipelined_ops):
        c = a + b
    dist.barrier()
    pipelined_s = slowest([time.perf_counter() - start])[0]
    del c
    out["add_call_p50_us"] = statistics.median(call_us)
    out["add_call_mean_us"] = statistics.fmean(call_us)
    out["add_sync_p50_us"] = statistics.median(sync_us)
    out["add_sync_mean_us"] = statistics.fmean(sync_us)
    out["pipelined_ops_per_s"] = args.pipelined_ops / pipelined_s

    # The 20 ATen ops of dtensor_bench's MixedProgram, in its order, on the same layouts.
    aten = torch.ops.aten

    def mixed_program(x, w, b):
        h = aten.mm(x, w)
        h = aten.add.Tensor(h, b)
        h = aten.relu(h)
        y = aten.mul.Scalar(h, 0.5)
        e = aten.exp(y)
        s = aten.sum.dim_IntList(e, [1], True)
        p = aten.div.Tensor(e, s)
        aten.transpose.int(p, 0, 1)
        v = aten.view(x, [64, 4, 8])
        v = aten.permute(v, [1, 0, 2])
        aten.sum.dim_IntList(v, [1])
        q = aten.sub.Tensor(p, x)
        q = aten.tanh(q)
        r = aten.mm(q, w)
        r = aten.neg(r)
        r = aten.add.Tensor(r, h)
        m = aten.mean.dim(r, [1])
        m = aten.unsqueeze(m, 1)
        z = aten.mul.Tensor(r, m)
        return aten.sum(z)

    def values(*shape):
        n = 1
        for d in shape:
            n *= d
        return (torch.arange(n, dtype=torch.float32) % 7 / 7).reshape(shape)

    px = distribute_tensor(values(64, 32), mesh, [Shard(0)])
    pw = distribute_tensor(values(32, 32), mesh, [Replicate()])
    pb = distribute_tensor(values(32), mesh, [Replicate()])
    # One program, then a barrier (its result on every rank), as the service's Synchronize.
    t = timed(lambda: (mixed_program(px, pw, pb), dist.barrier()), args.program_iterations, 10)
    out["program_p50_us"] = statistics.median(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.program_iterations):
        mixed_program(px, pw, pb)
    dist.barrier()
    out["programs_per_s"] = args.program_iterations / slowest([time.perf_counter() - start])[0]

    x = distribute_tensor(torch.ones(args.redistribute_bytes // 4), mesh, [Shard(0)])
    t = timed(lambda: x.redistribute(mesh, [Replicate()]), args.redistribute_iterations, 1)
    out["redistribute_us"] = statistics.median(t)

    if rank == 0:
        print(f"torch {torch.__version__}, gloo backend, {n} processes", file=sys.stderr)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    dist.destroy_process_group()
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--transfer_bytes", type=int, default=256 << 20)
    parser.add_argument("--transfer_iterations", type=int, default=3)
    parser.add_argument("--tiny_elements", type=int, default=256)
    parser.add_argument("--latency_iterations", type=int, default=1000)
    parser.add_argument("--pipelined_ops", type=int, default=1000)
    parser.add_argument("--program_iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--redistribute_bytes", type=int, default=64 << 20)
    parser.add_argument("--redistribute_iterations", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if "RANK" not in os.environ:
        return launch(args)
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
