"""The Python client with torch: CPU torch tensors of every dtype in and out, tessera.export of a
torch module, and the same calls against torch's own DTensor on gloo (4 processes, a (2, 2) mesh
and a 1-D mesh of 4; torch_dtensor_reference.py) giving the same local shards and results.
Skips without torch."""

import json
import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")
torch = pytest.importorskip("torch", reason="torch is not installed")

from tessera import ColwiseParallel, Replicate, RowwiseParallel, Shard  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PLACEMENTS = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}


@pytest.mark.parametrize("dtype", [d.name for d in tessera.all_dtypes])
def test_torch_tensors_in_and_out(meshes, dtype):
    t_dtype = getattr(torch, dtype)
    x = (torch.arange(35).reshape(5, 7) % 5 - 2).to(t_dtype)
    d = tessera.distribute_tensor(x, meshes["grid"], [Shard(0), Shard(1)])
    assert d.dtype == tessera.dtypes.as_dtype(t_dtype)
    back = d.full_tensor()
    assert isinstance(back, torch.Tensor) and back.dtype == t_dtype
    assert torch.equal(back, x)
    assert torch.equal(d.to_local(3), x[3:, 4:])
    assert isinstance(d.full_tensor(kind="numpy"), np.ndarray)
    f = tessera.DTensor.from_local([x[:3], x[:3], x[3:], x[3:]], meshes["grid"], [Shard(0), Replicate()],
                                   shape=(5, 7))
    assert torch.equal(f.full_tensor(), x)


def test_export_writes_what_load_module_takes(meshes, tmp_path):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(6)
            self.proj = torch.nn.Linear(6, 4, dtype=torch.float64).float()
            self.act = torch.nn.SiLU()

        def forward(self, x):
            return self.act(self.proj(self.norm(x)))

    torch.manual_seed(1)
    block = Block()
    exported = tessera.export(block, tmp_path, name="block")
    spec = json.loads(exported.spec_path.read_text())
    assert [c["name"] for c in spec["children"]] == ["norm", "proj", "act"]
    on_disk = tessera.safetensors.read(exported.weights_path, kind="torch")
    assert set(on_disk) == set(block.state_dict())
    m = tessera.load_module(exported, mesh=meshes["world"])
    x = torch.randn(3, 6)
    torch.testing.assert_close(m(x), block(x), rtol=1e-5, atol=1e-5)
    m.remove()
    double = torch.nn.Sequential(torch.nn.Linear(3, 2)).double()
    assert tessera.export(double, tmp_path, name="d").spec["input"] == {"dtype": "float64", "shape": [-1, 3]}
    with pytest.raises(tessera.Unimplemented, match="Conv1d"):
        tessera.export(torch.nn.Sequential(torch.nn.Conv1d(1, 1, 1)), tmp_path)


@pytest.fixture(scope="module")
def torch_reference(tmp_path_factory):
    """Every rank's results from torch's DTensor on gloo."""
    out = tmp_path_factory.mktemp("torch_dtensor")
    result = subprocess.run([sys.executable, os.path.join(HERE, "torch_dtensor_reference.py"), str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(4)]


def data(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def placements(names):
    return [PLACEMENTS[n] for n in names]


@pytest.mark.parametrize("names", [("S0", "S1"), ("S0", "S0"), ("S1", "S1"), ("R", "S0"), ("S1", "R"),
                                   ("R", "R")], ids="-".join)
def test_distribute_tensor_same_shards_as_torch(meshes, torch_reference, names):
    t = tessera.distribute_tensor(data((5, 7), 1), meshes["grid"], placements(names))
    for r in range(4):
        np.testing.assert_array_equal(t.to_local(r), torch_reference[r]["distribute_" + "-".join(names)])


@pytest.mark.parametrize("src,dst", [(("S0", "S1"), ("R", "S0")), (("S0", "S0"), ("S1", "R")),
                                     (("S1", "S1"), ("S0", "S1")), (("R", "S0"), ("S0", "S0"))],
                         ids=lambda p: "-".join(p))
def test_redistribute_same_shards_as_torch(meshes, torch_reference, src, dst):
    t = tessera.distribute_tensor(data((5, 7), 1), meshes["grid"], placements(src))
    r = t.redistribute(meshes["grid"], placements(dst))
    key = f"redistribute_{'-'.join(src)}_{'-'.join(dst)}"
    for rank in range(4):
        np.testing.assert_array_equal(r.to_local(rank), torch_reference[rank][key])


@pytest.mark.parametrize("pa,pb", [("S0", "R"), ("R", "S1"), ("S1", "S0"), ("R", "R")])
def test_mm_same_placement_and_locals_as_torch(meshes, torch_reference, pa, pb):
    mesh = meshes["world"]
    y = tessera.mm(tessera.distribute_tensor(data((9, 10), 2), mesh, [PLACEMENTS[pa]]),
                   tessera.distribute_tensor(data((10, 6), 3), mesh, [PLACEMENTS[pb]]))
    key = f"mm_{pa}_{pb}"
    torch_placement = str(torch_reference[0][key + "_placement"])
    ours = {"Shard(dim=0)": "S(0)", "Shard(dim=1)": "S(1)", "Replicate()": "R", "Partial(sum)": "P(sum)"}
    assert ours[repr(y.placements[0])] == torch_placement.replace("Shard(dim=", "S(").replace(
        "Replicate()", "R").replace("Partial(sum)", "P(sum)")
    for r in range(4):
        np.testing.assert_allclose(y.to_local(r), torch_reference[r][key], rtol=1e-5, atol=1e-6)


def test_parallelize_module_same_shards_gradients_and_output_as_torch(meshes, torch_reference):
    mesh = meshes["grid"]
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 12))
    weights = {name: data(tuple(p.shape), 10 + i) for i, (name, p) in enumerate(model.named_parameters())}
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    exported = tessera.export(model, os.path.join(os.environ.get("TMPDIR", "/tmp"), "tessera-torch-ref"))
    m = tessera.load_module(exported, mesh=mesh)
    tessera.parallelize_module(m, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    params = dict(m.named_parameters())
    inp = data((8, 10), 20)
    step = m.step(inp)  # gradients only
    for r in range(4):
        for name in weights:
            np.testing.assert_array_equal(params[name].to_local(r), torch_reference[r]["param_" + name])
            np.testing.assert_allclose(step.gradients[name].to_local(r), torch_reference[r]["grad_" + name],
                                       rtol=1e-4, atol=1e-5, err_msg=f"{name} rank {r}")
    np.testing.assert_allclose(m(inp), torch_reference[0]["forward"], rtol=1e-5, atol=1e-5)
    m.remove()
