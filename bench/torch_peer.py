#!/usr/bin/env python3
"""torch.distributed (gloo backend) peer of bench/collectives_bench.

Runs --size processes (torch.multiprocessing) over loopback that time all_reduce, all_gather,
reduce_scatter, all_to_all and broadcast (root 0) on float32 tensors, the way raw_gloo_peer does:
--bytes is the nccl-tests size (the whole array); per size, --warmup untimed calls per collective,
then --iterations timed ones, each after a barrier, its time the slowest rank's. Rank 0 writes
"<op> <bytes> <us> <us> ..." (every timed call) per line to --out, and the torch version and the
API used for each collective to stderr. With --bursts, each collective then also runs that many
bursts of --iterations calls started with async_op=True and waited for at the end (one barrier
before each burst), each reported as its time over --iterations (nccl-tests' time), on
"<op>/burst" lines.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def collectives(n, nbytes):
    """The five collectives on buffers allocated once for this size: name -> (api, call)."""
    count = nbytes // 4
    block = count // n
    full = torch.ones(count, dtype=torch.float32)
    other = torch.zeros(count, dtype=torch.float32)
    part = torch.ones(block, dtype=torch.float32)
    return {
        "all_reduce": ("all_reduce", lambda a=False: dist.all_reduce(full, async_op=a)),
        "all_gather": ("all_gather_into_tensor",
                       lambda a=False: dist.all_gather_into_tensor(full, part, async_op=a)),
        "reduce_scatter": ("reduce_scatter_tensor",
                           lambda a=False: dist.reduce_scatter_tensor(part, full, async_op=a)),
        "all_to_all": ("all_to_all_single",
                       lambda a=False: dist.all_to_all_single(other, full, async_op=a)),
        "broadcast": ("broadcast", lambda a=False: dist.broadcast(full, 0, async_op=a)),
    }


def run(rank, args):
    torch.set_num_threads(1)  # the workers of a 2-core machine; Gloo does the reductions
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank,
                            world_size=args.size)
    sizes = [int(b) for b in args.bytes.split(",")]
    iterations = [int(i) for i in args.iterations.split(",")]
    warmups = [int(w) for w in args.warmup.split(",")]
    out = open(args.out, "w") if rank == 0 else None
    if rank == 0:
        print(f"torch {torch.__version__}, gloo backend, {args.size} processes", file=sys.stderr)
    for nbytes, iters, warmup in zip(sizes, iterations, warmups):
        for op, (api, call) in collectives(args.size, nbytes).items():
            for _ in range(warmup):
                call()
            times = torch.zeros(iters, dtype=torch.float64)
            for i in range(iters):
                dist.barrier()
                start = time.perf_counter()
                call()
                times[i] = (time.perf_counter() - start) * 1e6
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            bursts = torch.zeros(args.bursts, dtype=torch.float64)
            for b in range(args.bursts):
                dist.barrier()
                start = time.perf_counter()
                works = [call(True) for _ in range(iters)]
                for w in works:
                    w.wait()
                bursts[b] = (time.perf_counter() - start) * 1e6 / max(iters, 1)
            if args.bursts:
                dist.all_reduce(bursts, op=dist.ReduceOp.MAX)
            if out:
                out.write(f"{op} {nbytes} " + " ".join(f"{t:.3f}" for t in times.tolist()) + "\n")
                if args.bursts:
                    out.write(f"{op}/burst {nbytes} " +
                              " ".join(f"{t:.3f}" for t in bursts.tolist()) + "\n")
                out.flush()
                if nbytes == sizes[0]:
                    print(f"  {op}: dist.{api}", file=sys.stderr)
    if out:
        out.close()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--bytes", default="4096")
    parser.add_argument("--iterations", default="20")
    parser.add_argument("--warmup", default="3")
    parser.add_argument("--out", required=True)
    parser.add_argument("--bursts", type=int, default=0)
    parser.add_argument("--init", required=True, help="file for the FileStore rendezvous")
    args = parser.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(run, args=(args,), nprocs=args.size, join=True)


if __name__ == "__main__":
    main()
