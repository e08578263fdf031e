"""A remote inference call: an MLP loaded on the cluster, parallelized and published, then
called over KServe v2 (the Open Inference Protocol) on the coordinator's port, with Triton's
Python client when it is installed or Tessera's own stubs otherwise; the answer is checked
against numpy on the module's parameters.

    python3 examples/remote_inference.py 127.0.0.1:PORT [--client auto|tessera|tritonclient]
"""

import argparse
import os

import numpy as np

import tessera
from tessera import ColwiseParallel, RowwiseParallel

MLP = {"type": "Module", "children": [
    {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 3}]}


def infer_with_tritonclient(address: str, model: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    assert client.is_model_ready(model)
    tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor]).as_numpy("output")


def infer_with_tessera(model: str, x: np.ndarray) -> np.ndarray:
    client = tessera.InferenceClient()
    assert client.model_ready(model)
    meta = client.model_metadata(model)
    print(f"model {meta.name} versions {list(meta.versions)}: "
          f"{[(i.name, i.datatype, list(i.shape)) for i in meta.inputs]} -> "
          f"{[(o.name, o.datatype, list(o.shape)) for o in meta.outputs]}")
    return client.infer(model, x)


def main(address: str, client: str = "auto") -> None:
    tessera.connect(address)
    mesh = tessera.get_device_mesh("world")
    model = tessera.load_module(MLP, mesh=mesh, seed=3, name="example-mlp",
                                plan={"net1": ColwiseParallel(), "net2": RowwiseParallel()})
    model.publish("1", max_batch_size=16)
    w = model.state_dict()
    x = np.random.default_rng(1).uniform(-1, 1, (4, 10)).astype(np.float32)
    expected = np.maximum(x @ w["net1.weight"].T + w["net1.bias"], 0) @ w["net2.weight"].T + w["net2.bias"]
    if client == "auto":
        try:
            import tritonclient.grpc  # noqa: F401

            client = "tritonclient"
        except ImportError:
            client = "tessera"
    try:
        if client == "tritonclient":
            y = infer_with_tritonclient(address, "example-mlp", x)
        else:
            y = infer_with_tessera("example-mlp", x)
        print(f"ModelInfer through {client}: {y.shape} {y.dtype}")
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    finally:
        model.remove()  # unpublishes it too
    print("ok")
    tessera.get_session().close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", nargs="?", default=os.environ.get("TESSERA_COORDINATOR"))
    parser.add_argument("--client", choices=["auto", "tessera", "tritonclient"], default="auto")
    args = parser.parse_args()
    main(args.address, args.client)
