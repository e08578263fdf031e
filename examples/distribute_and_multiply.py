"""Distribute a tensor and multiply its shards (torch.distributed._tensor's first example, on
Tessera): a [N, N] random tensor sharded by rows over a 1-D mesh, each rank's product with its
transpose, the partial results summed with all_reduce; then the same with DTensor ops, where
sharding propagation picks the strategy.

    tessera up --workers 4                       # prints the coordinator's address
    python3 examples/distribute_and_multiply.py 127.0.0.1:PORT [--size 512]
"""

import argparse
import os

import numpy as np

import tessera
from tessera import Partial, Shard


def main(address: str, size: int = 512) -> None:
    tessera.connect(address)
    world = len([w for w in tessera.get_session().list_workers() if w.alive])
    mesh = tessera.init_device_mesh("cpu", (world,))
    x_np = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    expected = x_np.astype(np.float64) @ x_np.T.astype(np.float64)

    # The seed's way: shard, multiply each rank's shard by its transpose, all_reduce. Sharding by
    # columns makes the sum of the local products the whole x @ x.T.
    sharded = tessera.distribute_tensor(x_np, mesh, [Shard(1)])
    print(f"distributed {sharded.shape} over {world} ranks, local shapes {sharded.local_shapes}")
    local_results = [s @ s.T for s in sharded.local_tensors()]
    summed = tessera.distributed.tensor(local_results, mesh)
    tessera.distributed.all_reduce(summed)                # torch.distributed.all_reduce
    for rank in range(world):
        np.testing.assert_allclose(summed.to_local(rank), expected, rtol=1e-3, atol=1e-2)
    print("local mm + all_reduce: every rank holds x @ x.T")

    # With DTensor ops the multiply runs on the workers: S(1) x S(0) -> Partial(sum) with no
    # communication, reduced when the result is read.
    y = sharded @ sharded.T
    assert y.placements == (Partial("sum"),) and y.redistributions == ()
    np.testing.assert_allclose(y.full_tensor(), expected, rtol=1e-3, atol=1e-2)
    # Row-sharded, as in the seed: S(0) x S(1) needs a redistribution, which the op reports.
    rows = tessera.distribute_tensor(x_np, mesh, [Shard(0)])
    z = tessera.mm(rows, rows.t())
    print(f"mm of S(0) by its transpose: output {z.placements}, implicit redistributions "
          f"{[(r.from_placements, r.to_placements) for r in z.redistributions]}")
    np.testing.assert_allclose(z.full_tensor(), expected, rtol=1e-3, atol=1e-2)
    print("ok")
    tessera.get_session().close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", nargs="?", default=os.environ.get("TESSERA_COORDINATOR"))
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    main(args.address, args.size)
