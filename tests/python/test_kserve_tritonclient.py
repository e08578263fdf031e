"""Triton's Python client (tritonclient on PyPI) against Tessera's KServe v2 endpoint, unchanged.

Optional: skips with a message when tritonclient (with its grpc extra) or numpy is not
importable, or when the test server is not built. The server is kserve_test_server
(tests/support/kserve_test_server.cc), serving the models of tests/support/served_test_models.h; its path comes
from $TESSERA_KSERVE_TEST_SERVER, else build/tests/kserve_test_server under the repository.

    pip install "tritonclient[grpc]" pytest      # in a virtual environment
    pytest tests/python/test_kserve_tritonclient.py
"""

import os
import pathlib
import subprocess
import threading

import pytest

np = pytest.importorskip("numpy", reason="numpy is not installed")
grpcclient = pytest.importorskip(
    "tritonclient.grpc", reason="tritonclient[grpc] is not installed (pip install 'tritonclient[grpc]')"
)
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
SERVER = pathlib.Path(
    os.environ.get("TESSERA_KSERVE_TEST_SERVER", REPO / "build" / "tests" / "kserve_test_server")
)

# The affine model's weights (tests/support/served_test_models.h): y = x @ (s * A) + s * b; version "2"
# has s = 1, version "10" (the default, the highest) s = 2.
AFFINE_A = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.25]], dtype=np.float32)
AFFINE_B = np.array([0.5, -1.0], dtype=np.float32)


def affine(x, scale):
    return (x.astype(np.float32) @ (scale * AFFINE_A) + scale * AFFINE_B).astype(np.float32)


def inputs(rows, cols=3):
    """Multiples of 0.25 in [-1.25, 1.25]: exact in FP16 and BF16."""
    i = np.arange(rows * cols)
    return (((i * 3) % 11 - 5) * 0.25).astype(np.float32).reshape(rows, cols)


@pytest.fixture(scope="module")
def client():
    if not SERVER.exists():
        pytest.skip(f"{SERVER} is not built (cmake --build build --target kserve_test_server)")
    server = subprocess.Popen([str(SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on port "), line
        port = int(line.split()[-1])
        yield grpcclient.InferenceServerClient(url=f"127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def infer(client, model, name, x, datatype, version=""):
    tensor = grpcclient.InferInput(name, list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor], model_version=version, request_id="rid-7")


def test_server_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata.name == "tessera"
    assert metadata.version


def test_model_ready_and_metadata(client):
    assert client.is_model_ready("affine")
    assert client.is_model_ready("affine", "2")
    assert not client.is_model_ready("affine", "3")
    assert not client.is_model_ready("nope")
    metadata = client.get_model_metadata("affine")
    assert metadata.name == "affine"
    assert list(metadata.versions) == ["2", "10"]
    assert metadata.platform == "tessera"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("x", "FP32", [-1, 3])]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [("y", "FP32", [-1, 2])]


@pytest.mark.parametrize("version,scale", [("", 2.0), ("2", 1.0), ("10", 2.0)])
@pytest.mark.parametrize("datatype,numpy_type", [("FP32", np.float32), ("FP16", np.float16), ("FP64", np.float64)])
@pytest.mark.parametrize("rows", [1, 3])
def test_affine_infer(client, version, scale, datatype, numpy_type, rows):
    x = inputs(rows)
    result = infer(client, "affine", "x", x.astype(numpy_type), datatype, version)
    np.testing.assert_array_equal(result.as_numpy("y"), affine(x, scale))
    response = result.get_response()
    assert response.model_name == "affine"
    assert response.model_version == (version or "10")
    assert response.id == "rid-7"


def test_bf16_model(client):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (tritonclient's BF16) is not installed")
    x = inputs(2, 4)
    result = infer(client, "twice_plus_one", "x", x.astype(ml_dtypes.bfloat16), "BF16")
    np.testing.assert_array_equal(result.as_numpy("y").astype(np.float32), 2 * x + 1)
    # An FP32 input is converted to the model's BF16.
    result = infer(client, "twice_plus_one", "x", x, "FP32")
    np.testing.assert_array_equal(result.as_numpy("y").astype(np.float32), 2 * x + 1)


def test_int64_model(client):
    ids = np.array([0, 7, -3, 1 << 20], dtype=np.int64)
    result = infer(client, "ids", "ids", ids, "INT64")
    want = np.stack([ids / 2.0, -ids.astype(np.float64)], axis=1).astype(np.float32)
    np.testing.assert_array_equal(result.as_numpy("y"), want)


@pytest.mark.parametrize(
    "model,name,x,datatype,status,named",
    [
        ("nope", "x", inputs(2), "FP32", "StatusCode.NOT_FOUND", "'nope'"),
        ("affine", "q", inputs(2), "FP32", "StatusCode.INVALID_ARGUMENT", "'q'"),
        ("affine", "x", inputs(2, 4), "FP32", "StatusCode.INVALID_ARGUMENT", "[2, 4]"),
        ("affine", "x", inputs(2).astype(np.int64), "INT64", "StatusCode.INVALID_ARGUMENT", "INT64"),
        ("batched", "x", inputs(5), "FP32", "StatusCode.INVALID_ARGUMENT", "max_batch_size 4"),
    ],
)
def test_bad_requests(client, model, name, x, datatype, status, named):
    with pytest.raises(InferenceServerException) as error:
        infer(client, model, name, x, datatype)
    assert error.value.status() == status
    assert named in error.value.message()


def test_concurrent_requests_to_a_batched_model(client):
    xs = [inputs(1) + k for k in range(12)]
    results = [None] * len(xs)

    def run(k):
        results[k] = infer(client, "batched", "x", xs[k], "FP32").as_numpy("y")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, x in enumerate(xs):
        np.testing.assert_array_equal(results[k], affine(x, 1.0))
