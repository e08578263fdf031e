"""Export a PyTorch module and serve it: tessera.export writes the module spec and its
state_dict as safetensors, load_module puts it on the cluster, parallelize_module shards it with
torch's styles, and the forward (torch tensors in and out), a training step and a KServe call
are checked against the same module in torch. Needs torch.

    python3 examples/export_torch_module.py 127.0.0.1:PORT
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from torch import nn

import tessera
from tessera import ColwiseParallel, RowwiseParallel


def main(address: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(6, 8)

    tessera.connect(address)
    mesh = tessera.get_device_mesh("world")
    with tempfile.TemporaryDirectory() as directory:
        exported = tessera.export(model, directory, name="mlp")
        print(f"exported {exported.spec_path.name}: {exported.spec}")
        served = tessera.load_module(exported, mesh=mesh, name="example-torch-mlp")
    tessera.parallelize_module(served, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    y = served(x)  # a torch tensor in, a torch tensor out
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    print("forward matches torch")

    step = served.step(x, lr=0.1)
    model(x).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    state = served.state_dict(kind="torch")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5)
    print(f"step: loss {step.loss:.4f}; parameters match torch.optim.SGD's")

    served.publish("1")
    answer = tessera.InferenceClient().infer("example-torch-mlp", x.numpy())
    np.testing.assert_allclose(answer, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    print("served over KServe v2")
    served.remove()
    print("ok")
    tessera.get_session().close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", nargs="?", default=os.environ.get("TESSERA_COORDINATOR"))
    main(parser.parse_args().address)
