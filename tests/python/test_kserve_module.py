"""Triton's Python client (tritonclient on PyPI) calling modules published on a real local cluster.

`tessera up --workers 2` starts a coordinator and two CPU workers with mesh 'world'; the `tessera
module` CLI loads each module from a JSON spec and a safetensors file written here with numpy,
parallelizes it by Megatron's colwise/rowwise plan and publishes it for KServe v2; the client's
answers are compared with the same model in numpy.

Optional: skips with a message when tritonclient (with its grpc extra) or numpy is not importable,
or when the CLI is not built. Its path comes from $TESSERA_CLI, else build/client/tessera under the
repository (which finds the daemons beside it in the build tree).

    pip install "tritonclient[grpc]" pytest      # in a virtual environment
    pytest tests/python/test_kserve_module.py
"""

import json
import os
import pathlib
import re
import signal
import struct
import subprocess
import threading

import pytest

try:
    import numpy as np
except ImportError as error:
    pytest.skip(f"numpy is not importable ({error})", allow_module_level=True)
try:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
except Exception as error:  # absent, or installed without its grpc extra
    pytest.skip(
        f"tritonclient[grpc] is not importable ({error}); pip install 'tritonclient[grpc]'",
        allow_module_level=True,
    )

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("TESSERA_CLI", REPO / "build" / "client" / "tessera"))

# float32 on the service against float64 in numpy.
TOLERANCE = dict(rtol=1e-5, atol=1e-5)

# MLP(net1 = Linear(10, 16), relu, net2 = Linear(16, 12)), input [-1, 10].
MLP_SPEC = {
    "type": "Module",
    "children": [
        {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
        {"name": "relu", "type": "ReLU"},
        {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 12},
    ],
}
MLP_PLAN = {"plan": {"net1": "ColwiseParallel", "net2": "RowwiseParallel"}}

# Token ids [batch, seq] -> Embedding(30, 8) -> Linear(8, 12) -> ReLU -> Linear(12, 6).
VOCAB = 30
IDS_SPEC = {
    "type": "Module",
    "children": [
        {"name": "tok", "type": "Embedding", "num_embeddings": VOCAB, "embedding_dim": 8},
        {"name": "net1", "type": "Linear", "in_features": 8, "out_features": 12},
        {"name": "relu", "type": "ReLU"},
        {"name": "net2", "type": "Linear", "in_features": 12, "out_features": 6},
    ],
}
IDS_PLAN = {
    "plan": {
        "tok": {"style": "RowwiseParallel", "input_layouts": "Replicate()"},
        "net1": "ColwiseParallel",
        "net2": "RowwiseParallel",
    }
}


def mlp_weights(seed):
    rng = np.random.default_rng(seed)
    shapes = {"net1.weight": (16, 10), "net1.bias": (16,), "net2.weight": (12, 16), "net2.bias": (12,)}
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in shapes.items()}


def ids_weights(seed):
    rng = np.random.default_rng(seed)
    shapes = {
        "tok.weight": (VOCAB, 8),
        "net1.weight": (12, 8),
        "net1.bias": (12,),
        "net2.weight": (6, 12),
        "net2.bias": (6,),
    }
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in shapes.items()}


def linear(x, w, name):
    return x @ w[name + ".weight"].astype(np.float64).T + w[name + ".bias"].astype(np.float64)


def mlp(w, x):
    """The MLP in float64 on what the model sees (x as float32)."""
    h = np.maximum(linear(x.astype(np.float32).astype(np.float64), w, "net1"), 0)
    return linear(h, w, "net2")


def ids_model(w, ids):
    e = w["tok.weight"].astype(np.float64)[ids]
    return linear(np.maximum(linear(e, w, "net1"), 0), w, "net2")


def write_safetensors(path, tensors):
    """The safetensors format: a little-endian u64 header size, a JSON header, the bytes."""
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = np.ascontiguousarray(t, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Cluster:
    """`tessera up --workers 2`, and the `tessera module` commands run against it."""

    def __init__(self, directory):
        self.dir = directory
        self.process = subprocess.Popen([str(CLI), "up", "--workers", "2"], stdout=subprocess.PIPE, text=True)
        self.address = None
        for line in self.process.stdout:
            found = re.search(r"coordinator at (\S+),", line)
            if found:
                self.address = found.group(1)
                break
        if self.address is None:
            self.stop()
            raise RuntimeError(f"tessera up ended without a coordinator address (exit {self.process.returncode})")
        self.client = grpcclient.InferenceServerClient(url=self.address)

    def load(self, name, spec, plan, weights):
        """tessera module load, then tessera module parallelize by `plan`."""
        (self.dir / f"{name}.json").write_text(json.dumps(spec))
        (self.dir / f"{name}.plan.json").write_text(json.dumps(plan))
        write_safetensors(self.dir / f"{name}.safetensors", weights)
        self.module("load", self.dir / f"{name}.json", "--weights", self.dir / f"{name}.safetensors",
                    "--mesh", "world", "--name", name)
        self.module("parallelize", name, "--plan", self.dir / f"{name}.plan.json")

    def publish(self, name, version="1", max_batch_size=0, max_queue_delay_us=500):
        out = self.module("publish", name, "--version", version, "--max-batch-size", max_batch_size,
                          "--max-queue-delay-us", max_queue_delay_us)
        assert out.startswith("published "), out

    def module(self, *args):
        """`tessera module ARGS --coordinator ADDRESS`; its stdout, after checking it succeeded."""
        result = subprocess.run(
            [str(CLI), "module", *map(str, args), "--coordinator", self.address],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, f"tessera module {' '.join(map(str, args))}: {result.stderr}"
        return result.stdout

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


MLP_WEIGHTS = mlp_weights(1)
IDS = ids_weights(3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not CLI.exists():
        pytest.skip(f"{CLI} is not built (cmake --build build --target tessera)")
    c = Cluster(tmp_path_factory.mktemp("modules"))
    try:
        # Model "mlp": version 1 without batching, version 2 (the default) with it.
        c.load("mlp", MLP_SPEC, MLP_PLAN, MLP_WEIGHTS)
        c.publish("mlp", version="1")
        c.publish("mlp", version="2", max_batch_size=8, max_queue_delay_us=20000)
        c.load("ids", IDS_SPEC, IDS_PLAN, IDS)
        c.publish("ids")
        yield c
    finally:
        c.stop()


def inputs(rows, cols=10, seed=0):
    """Multiples of 1/8 in [-2, 2]: exact in FP16 and BF16."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-16, 17, size=(rows, cols)) / 8).astype(np.float32)


def infer(client, model, x, datatype, version="", name="input"):
    tensor = grpcclient.InferInput(name, list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor], model_version=version, request_id="rid-3")


def test_server_is_live_and_ready(cluster):
    assert cluster.client.is_server_live()
    assert cluster.client.is_server_ready()
    assert cluster.client.get_server_metadata().name == "tessera"


def test_model_ready_and_metadata(cluster):
    client = cluster.client
    assert client.is_model_ready("mlp")
    assert client.is_model_ready("mlp", "1")
    assert client.is_model_ready("mlp", "2")
    assert not client.is_model_ready("mlp", "3")
    assert not client.is_model_ready("nope")
    metadata = client.get_model_metadata("mlp")
    assert metadata.name == "mlp"
    assert list(metadata.versions) == ["1", "2"]
    assert metadata.platform == "tessera"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("input", "FP32", [-1, 10])]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [("output", "FP32", [-1, 12])]
    metadata = client.get_model_metadata("ids")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("input", "INT64", [-1, -1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [("output", "FP32", [-1, -1, 6])]


@pytest.mark.parametrize("version", ["", "1", "2"], ids=["default", "v1", "v2"])
@pytest.mark.parametrize("datatype,numpy_type", [("FP32", np.float32), ("FP16", np.float16), ("FP64", np.float64)])
@pytest.mark.parametrize("rows", [1, 5])
def test_mlp_infer(cluster, version, datatype, numpy_type, rows):
    x = inputs(rows, seed=rows).astype(numpy_type)
    result = infer(cluster.client, "mlp", x, datatype, version)
    y = result.as_numpy("output")
    assert y.dtype == np.float32 and y.shape == (rows, 12)
    np.testing.assert_allclose(y, mlp(MLP_WEIGHTS, x), **TOLERANCE)
    response = result.get_response()
    assert response.model_name == "mlp"
    assert response.model_version == (version or "2")
    assert response.id == "rid-3"


def test_bf16_input(cluster):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (tritonclient's BF16) is not installed")
    x = inputs(3, seed=9)
    y = infer(cluster.client, "mlp", x.astype(ml_dtypes.bfloat16), "BF16", "1").as_numpy("output")
    np.testing.assert_allclose(y, mlp(MLP_WEIGHTS, x), **TOLERANCE)


def test_int64_token_ids(cluster):
    ids = np.random.default_rng(4).integers(0, VOCAB, size=(3, 5)).astype(np.int64)
    y = infer(cluster.client, "ids", ids, "INT64").as_numpy("output")
    assert y.shape == (3, 5, 6)
    np.testing.assert_allclose(y, ids_model(IDS, ids), **TOLERANCE)


@pytest.mark.parametrize("version", ["1", "2"], ids=["unbatched", "batched"])
@pytest.mark.parametrize("max_rows", [1, 3])
def test_concurrent_requests_get_their_own_rows(cluster, version, max_rows):
    xs = [inputs(1 + k % max_rows, seed=100 + k) for k in range(16)]
    results = [None] * len(xs)

    def run(k):
        results[k] = infer(cluster.client, "mlp", xs[k], "FP32", version).as_numpy("output")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, x in enumerate(xs):
        np.testing.assert_allclose(results[k], mlp(MLP_WEIGHTS, x), **TOLERANCE)


def expect_models_answer(client):
    """Every published version answers as numpy."""
    x = inputs(2, seed=5)
    for version in ("1", "2"):
        np.testing.assert_allclose(infer(client, "mlp", x, "FP32", version).as_numpy("output"), mlp(MLP_WEIGHTS, x),
                                   **TOLERANCE)
    ids = np.array([[0, 29, 7]], dtype=np.int64)
    np.testing.assert_allclose(infer(client, "ids", ids, "INT64").as_numpy("output"), ids_model(IDS, ids), **TOLERANCE)


@pytest.mark.parametrize(
    "model,version,name,x,datatype,status,named",
    [
        ("nope", "", "input", inputs(2), "FP32", "StatusCode.NOT_FOUND", "'nope'"),
        ("mlp", "3", "input", inputs(2), "FP32", "StatusCode.NOT_FOUND", "version 3"),
        ("mlp", "", "x", inputs(2), "FP32", "StatusCode.INVALID_ARGUMENT", "'x'"),
        ("mlp", "", "input", inputs(2, 9), "FP32", "StatusCode.INVALID_ARGUMENT", "[2, 9]"),
        ("mlp", "", "input", inputs(2).astype(np.int64), "INT64", "StatusCode.INVALID_ARGUMENT", "INT64"),
        ("mlp", "2", "input", inputs(9), "FP32", "StatusCode.INVALID_ARGUMENT", "max_batch_size 8"),
        ("ids", "", "input", inputs(2, 3), "FP32", "StatusCode.INVALID_ARGUMENT", "FP32"),
        ("ids", "", "input", np.array([[1, 2, VOCAB]], dtype=np.int64), "INT64", "StatusCode.INVALID_ARGUMENT", "id 30"),
    ],
    ids=["unknown_model", "unknown_version", "input_name", "shape", "datatype", "rows", "ids_datatype", "id_range"],
)
def test_bad_requests_are_refused_and_the_model_answers_after(cluster, model, version, name, x, datatype, status, named):
    with pytest.raises(InferenceServerException) as error:
        infer(cluster.client, model, x, datatype, version, name)
    assert error.value.status() == status
    assert named in error.value.message()
    expect_models_answer(cluster.client)


def test_unpublished_and_removed_modules_are_not_served(cluster):
    cluster.load("gone", MLP_SPEC, MLP_PLAN, MLP_WEIGHTS)
    cluster.publish("gone", version="4")
    assert cluster.client.is_model_ready("gone", "4")
    x = inputs(2, seed=6)
    np.testing.assert_allclose(infer(cluster.client, "gone", x, "FP32").as_numpy("output"), mlp(MLP_WEIGHTS, x), **TOLERANCE)
    cluster.module("unpublish", "gone")
    assert not cluster.client.is_model_ready("gone")
    cluster.publish("gone", version="5")
    assert cluster.client.is_model_ready("gone", "5")
    cluster.module("rm", "gone")
    assert not cluster.client.is_model_ready("gone")
    with pytest.raises(InferenceServerException) as error:
        infer(cluster.client, "gone", x, "FP32")
    assert error.value.status() == "StatusCode.NOT_FOUND"
    assert "'gone'" in error.value.message()
