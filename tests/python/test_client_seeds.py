"""The seed examples (shared/seeds/000_*.txt: torch.distributed._tensor's distribute_tensor and
a multiply of the shards; 002_*.txt: torch.distributed.tensor.parallel's parallelize_module and
styles) rewritten for Tessera's Python client and checked against numpy."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import (ColwiseParallel, Partial, PrepareModuleInput, PrepareModuleOutput,  # noqa: E402
                     Replicate, RowwiseParallel, Shard)


@pytest.mark.parametrize("size", [64, 257])
def test_seed_000_distribute_then_mm_with_the_transpose_and_all_reduce(meshes, size):
    """input_tensor = randn(N, N); sharded = distribute_tensor(input, mesh, Shard(0));
    local_result = mm(sharded, sharded.t()); all_reduce(local_result)."""
    mesh = meshes["world"]
    x_np = np.random.default_rng(size).standard_normal((size, size)).astype(np.float32)
    expected = x_np.astype(np.float64) @ x_np.T.astype(np.float64)
    sharded = tessera.distribute_tensor(x_np, mesh, [Shard(0)])
    assert sharded.shape == (size, size)
    assert [s[0] for s in sharded.local_shapes] == [-(-size // 4)] * 3 + [size - 3 * -(-size // 4)]
    # DTensor: mm of S(0) by its transpose (S(1)); propagation redistributes as it needs.
    y = tessera.mm(sharded, sharded.t())
    np.testing.assert_allclose(y.full_tensor(), expected, rtol=1e-4, atol=1e-3)
    # The seed's local products summed by all_reduce (column shards make the sum x @ x.T).
    cols = sharded.redistribute(mesh, [Shard(1)])
    products = [b @ b.T for b in cols.local_tensors()]
    summed = tessera.distributed.tensor(products, mesh)
    tessera.distributed.all_reduce(summed)
    for rank in range(4):
        np.testing.assert_allclose(summed.to_local(rank), expected, rtol=1e-4, atol=1e-3)
    # The same as DTensors: S(1) x S(0) -> Partial(sum), then all_reduce to Replicate.
    p = cols @ cols.T
    assert p.placements == (Partial("sum"),)
    r = p.redistribute(mesh, [Replicate()])
    assert [s.collective for s in r.plan.steps] == ["all_reduce"]
    np.testing.assert_allclose(r.to_local(2), expected, rtol=1e-4, atol=1e-3)


BLOCK = {"type": "Module", "children": [
    {"name": "w1", "type": "Linear", "in_features": 8, "out_features": 24},
    {"name": "act", "type": "ReLU"},
    {"name": "w2", "type": "Linear", "in_features": 24, "out_features": 8}]}


def test_seed_002_parallelize_module_w1_colwise_w2_rowwise(meshes):
    """m = parallelize_module(m, tp_mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    on tp_mesh = init_device_mesh(..., (2, 2))["tp"]."""
    mesh = meshes["grid"]
    rng = np.random.default_rng(2)
    w = {"w1.weight": rng.uniform(-1, 1, (24, 8)), "w1.bias": rng.uniform(-1, 1, 24),
         "w2.weight": rng.uniform(-1, 1, (8, 24)), "w2.bias": rng.uniform(-1, 1, 8)}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    m = tessera.load_module(BLOCK, mesh=mesh, weights=w)
    m = tessera.parallelize_module(m, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    params = dict(m.named_parameters())
    assert params["w1.weight"].placements == (Replicate(), Shard(0))
    assert params["w2.weight"].placements == (Replicate(), Shard(1))
    assert params["w2.bias"].placements == (Replicate(), Replicate())
    x = rng.uniform(-1, 1, (6, 8)).astype(np.float32)
    y = np.maximum(x @ w["w1.weight"].T + w["w1.bias"], 0) @ w["w2.weight"].T + w["w2.bias"]
    out = m.forward(x, outputs="both")
    assert out.placement == Replicate() and not out.is_dtensor  # use_local_output=True
    np.testing.assert_allclose(out.full, y, rtol=1e-5, atol=1e-5)
    m.remove()


def test_seed_002_colwise_output_layouts_and_rowwise_defaults(meshes):
    """ColwiseParallel's output is Shard(-1) by default; output_layouts=Replicate() gathers it."""
    mesh = meshes["world"]
    m = tessera.load_module({"type": "Linear", "in_features": 4, "out_features": 8}, mesh=mesh, seed=5)
    w = m.state_dict()
    x = np.random.default_rng(3).uniform(-1, 1, (3, 4)).astype(np.float32)
    y = x @ w["weight"].T + w["bias"]
    tessera.parallelize_module(m, mesh, ColwiseParallel())
    out = m.forward(x, outputs="both")
    assert out.placement == Shard(1)
    for r in range(4):
        np.testing.assert_allclose(out.locals[r], y[:, 2 * r:2 * r + 2], rtol=1e-5, atol=1e-5)
    m.remove()
    m = tessera.load_module({"type": "Linear", "in_features": 4, "out_features": 8}, mesh=mesh, seed=5)
    tessera.parallelize_module(m, mesh, ColwiseParallel(output_layouts=Replicate()))
    out = m.forward(x, outputs="both")
    assert out.placement == Replicate()
    np.testing.assert_allclose(out.locals[3], y, rtol=1e-5, atol=1e-5)
    m.remove()


def test_seed_002_prepare_module_input_and_output(meshes):
    """PrepareModuleInput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(),
    None)) and PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(0))."""
    mesh = meshes["world"]
    dummy = {"type": "Module", "input": {"dtype": "float32", "shape": [-1, 3]}}
    m = tessera.load_module(dummy, mesh=mesh, weights={})
    tessera.parallelize_module(m, mesh, PrepareModuleInput(input_layouts=(Shard(0),),
                                                           desired_input_layouts=(Replicate(),)))
    pieces = [np.full((1, 3), r, np.float32) for r in range(4)]
    np.testing.assert_array_equal(m.forward(locals=pieces), np.concatenate(pieces))
    m.remove()
    m = tessera.load_module(dummy, mesh=mesh, weights={})
    tessera.parallelize_module(m, mesh, PrepareModuleOutput(output_layouts=Replicate(),
                                                            desired_output_layouts=Shard(0)))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = m.forward(x, outputs="local")
    for r in range(4):
        np.testing.assert_array_equal(out.locals[r], x[r:r + 1])
    m.remove()
