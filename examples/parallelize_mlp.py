"""Parallelize an MLP with a plan and run it (torch.distributed.tensor.parallel's example, on
Tessera): an MLP loaded from a spec and weights onto a (dp, tp) mesh, parallelize_module with
ColwiseParallel / RowwiseParallel on mesh["tp"], a forward and an SGD step, each checked against
numpy; then PrepareModuleInput and PrepareModuleOutput on a module without parameters.

    python3 examples/parallelize_mlp.py 127.0.0.1:PORT
"""

import argparse
import os

import numpy as np

import tessera
from tessera import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput, Replicate,
                     RowwiseParallel, Shard)

MLP = {"type": "Module", "children": [
    {"name": "w1", "type": "Linear", "in_features": 16, "out_features": 64},
    {"name": "relu", "type": "ReLU"},
    {"name": "w2", "type": "Linear", "in_features": 64, "out_features": 16}]}


def reference(w, x):
    h = x @ w["w1.weight"].T + w["w1.bias"]
    return np.maximum(h, 0) @ w["w2.weight"].T + w["w2.bias"], h


def main(address: str) -> None:
    tessera.connect(address)
    mesh = tessera.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    rng = np.random.default_rng(0)
    w = {"w1.weight": rng.uniform(-0.25, 0.25, (64, 16)), "w1.bias": rng.uniform(-0.25, 0.25, 64),
         "w2.weight": rng.uniform(-0.125, 0.125, (16, 64)), "w2.bias": rng.uniform(-0.125, 0.125, 16)}
    w = {k: v.astype(np.float32) for k, v in w.items()}

    model = tessera.load_module(MLP, mesh=mesh, weights=w)
    model = tessera.parallelize_module(model, mesh["tp"], {"w1": ColwiseParallel(),
                                                           "w2": RowwiseParallel()})
    for fqn, p in model.named_parameters():
        print(f"  {fqn:10} {p.placements}  local {p.local_shapes[0]}")
    x = rng.uniform(-1, 1, (8, 16)).astype(np.float32)
    y, h = reference(w, x)
    np.testing.assert_allclose(model(x), y, rtol=1e-4, atol=1e-5)
    print("forward matches numpy")

    # output.sum().backward(); SGD(lr=0.25).step() -- dp splits the batch, tp the layers.
    step = model.step(x, lr=0.25)
    dh = np.ones_like(y) @ w["w2.weight"] * (h > 0)
    expected = {"w1.weight": w["w1.weight"] - 0.25 * dh.T @ x, "w1.bias": w["w1.bias"] - 0.25 * dh.sum(0),
                "w2.weight": w["w2.weight"] - 0.25 * np.ones_like(y).T @ np.maximum(h, 0),
                "w2.bias": w["w2.bias"] - 0.25 * len(x)}
    for fqn, value in model.state_dict().items():
        np.testing.assert_allclose(value, expected[fqn], rtol=1e-4, atol=1e-4)
    print(f"step: loss {step.loss:.4f}, parameters match numpy's SGD")
    model.remove()

    # A module without parameters: its input taken as Shard(0) pieces and gathered, or its
    # replicated output chunked.
    dummy = {"type": "Module", "input": {"dtype": "float32", "shape": [-1, 4]}}
    tp = mesh["tp"]
    gather = tessera.load_module(dummy, mesh=mesh, weights={})
    tessera.parallelize_module(gather, tp, PrepareModuleInput(input_layouts=(Shard(0),),
                                                              desired_input_layouts=(Replicate(),)))
    pieces = [np.full((2, 4), r, np.float32) for r in range(4)]
    out = gather.forward(locals=pieces, outputs="both")
    np.testing.assert_array_equal(out.locals[1], np.concatenate(pieces[:2]))
    chunk = tessera.load_module(dummy, mesh=mesh, weights={})
    tessera.parallelize_module(chunk, tp, PrepareModuleOutput(output_layouts=Replicate(),
                                                              desired_output_layouts=Shard(0)))
    out = chunk.forward(np.arange(16, dtype=np.float32).reshape(4, 4), outputs="local")
    assert out.placement == Shard(0)
    # dp splits the batch (rows 0-1 and 2-3), then tp chunks each half: rank (0, 1) has row 1.
    np.testing.assert_array_equal(out.locals[1], [[4, 5, 6, 7]])
    np.testing.assert_array_equal(out.locals[2], [[8, 9, 10, 11]])
    gather.remove()
    chunk.remove()
    print("ok")
    tessera.get_session().close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", nargs="?", default=os.environ.get("TESSERA_COORDINATOR"))
    main(parser.parse_args().address)
