"""The Python client's checkpoints on `tessera up --workers 4`: a DTensor saved from the 2x2 mesh
(each worker writing its own blocks) and loaded onto a line of 3 and the 4-rank world under other
placements, compared exactly with the numpy array it came from; a module saved from the world
under a Megatron plan and loaded onto the line of 3 without one, its state_dict exact and its
forward against numpy; bad paths raise InvalidArgument.

Needs Debian's python3-grpcio, python3-numpy and python3-pytest, and the build tree's package
(cmake --build build --target tessera_python tessera); ctest runs it as python_client."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import (ColwiseParallel, Partial, Replicate, RowwiseParallel,  # noqa: E402
                     Shard)
from tessera_testing import values  # noqa: E402

SAVED = [[Shard(0), Shard(1)], [Partial("sum"), Shard(0)], [Replicate(), Shard(1)]]
LOADED = [("line3", [Shard(1)]), ("line3", [Replicate()]), ("world", [Shard(0)])]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("target", LOADED, ids=lambda t: f"{t[0]}-{t[1][0].to_json()}")
@pytest.mark.parametrize("saved", SAVED, ids=lambda p: ",".join(x.to_json() for x in p))
def test_save_then_load_elsewhere_is_exact(meshes, tmp_path, saved, target, dtype):
    full = values(dtype, (7, 6), 3).astype(dtype)
    t = tessera.distribute_tensor(full, meshes["grid"], saved)
    path = str(tmp_path / "ckpt")
    reply = tessera.save(t, path)
    assert reply.path == path
    mesh, placements = target
    back = tessera.load(path, meshes[mesh], placements)
    np.testing.assert_array_equal(back.full_tensor(kind="numpy"), full)
    t.free()
    back.free()


def test_bad_paths_raise_invalid_argument(meshes, tmp_path):
    t = tessera.distribute_tensor(np.ones((4, 4), np.float32), meshes["grid"],
                                  [Shard(0), Shard(1)])
    with pytest.raises(tessera.InvalidArgument):
        t.save("relative/ckpt")
    with pytest.raises(tessera.InvalidArgument):
        t.save(str(tmp_path / "no" / "parent"))
    with pytest.raises(tessera.NotFound):
        tessera.load(str(tmp_path / "missing"), meshes["line3"], [Shard(0)])
    t.free()


MLP_SPEC = {"type": "Module", "children": [
    {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 12}]}


@pytest.mark.parametrize("gradients", [False, True])
def test_module_checkpoint_loads_onto_another_mesh_and_plan(meshes, tmp_path, gradients):
    rng = np.random.default_rng(5)
    shapes = {"net1.weight": (16, 10), "net1.bias": (16,), "net2.weight": (12, 16),
              "net2.bias": (12,)}
    w = {k: rng.uniform(-1, 1, s).astype(np.float32) for k, s in shapes.items()}
    m = tessera.load_module(MLP_SPEC, mesh=meshes["world"], weights=w,
                            plan={"net1": ColwiseParallel(), "net2": RowwiseParallel()})
    x = rng.uniform(-1, 1, (5, 10)).astype(np.float32)
    if gradients:
        m.step(x)
    path = str(tmp_path / "mlp")
    reply = tessera.save(m, path) if not gradients else m.save_checkpoint(path, gradients=True)
    assert reply.path == path
    back = tessera.load_module(MLP_SPEC, mesh=meshes["line3"], checkpoint=path)
    want = m.state_dict()
    got = back.state_dict()
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    if gradients:
        grads = {k: v for k, v in m.state_dict(gradients=True).items() if k.endswith(".grad")}
        assert len(grads) == 4
        for k, v in grads.items():
            t = tessera.load(path, meshes["line3"], [Shard(0)], tensor=k)
            np.testing.assert_array_equal(t.full_tensor(kind="numpy"), v)
            t.free()
    else:
        h = np.maximum(x.astype(np.float64) @ w["net1.weight"].T + w["net1.bias"], 0)
        np.testing.assert_allclose(back(x), h @ w["net2.weight"].T + w["net2.bias"],
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(tessera.InvalidArgument):
        tessera.load_module(MLP_SPEC, mesh=meshes["line3"], checkpoint=path, seed=1)
    m.remove()
    back.remove()
