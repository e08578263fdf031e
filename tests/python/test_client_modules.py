"""Modules through the Python client: load_module from a dict, a safetensors file or a seed;
parallelize_module with the five parallel styles, distribute_module, forward and training steps
against numpy (and, for the transformer block, against the same module unsharded); state_dict,
save, publish and a KServe call."""

import json

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,  # noqa: E402
                     Replicate, RowwiseParallel, SequenceParallel, Shard)

TOL = dict(rtol=1e-5, atol=1e-5)
MLP_SPEC = {"type": "Module", "children": [
    {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 12}]}
BLOCK_SPEC = {"type": "Module", "input": {"dtype": "float64", "shape": [-1, -1, 8]}, "children": [
    {"name": "attn", "type": "Module", "residual": True, "children": [
        {"name": "norm", "type": "LayerNorm", "normalized_shape": 8},
        {"name": "attention", "type": "Attention", "dim": 8, "n_heads": 4, "causal": True}]},
    {"name": "mlp", "type": "Module", "residual": True, "children": [
        {"name": "norm", "type": "RMSNorm", "normalized_shape": 8},
        {"name": "net1", "type": "Linear", "in_features": 8, "out_features": 32},
        {"name": "act", "type": "GELU", "approximate": "tanh"},
        {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 8}]}]}
DUMMY_SPEC = {"type": "Module", "input": {"dtype": "float32", "shape": [-1, 7]}}


def mlp_weights(seed):
    rng = np.random.default_rng(seed)
    shapes = {"net1.weight": (16, 10), "net1.bias": (16,), "net2.weight": (12, 16), "net2.bias": (12,)}
    return {k: rng.uniform(-1, 1, s).astype(np.float32) for k, s in shapes.items()}


def mlp_forward(w, x):
    h = x.astype(np.float64) @ w["net1.weight"].T.astype(np.float64) + w["net1.bias"]
    return np.maximum(h, 0) @ w["net2.weight"].T.astype(np.float64) + w["net2.bias"], h


def mlp_sgd(w, x, lr):
    """output.sum().backward(), then SGD(lr): the parameters after one step."""
    y, h = mlp_forward(w, x)
    dy = np.ones_like(y)
    a = np.maximum(h, 0)
    dh = (dy @ w["net2.weight"].astype(np.float64)) * (h > 0)
    grads = {"net2.weight": dy.T @ a, "net2.bias": dy.sum(0),
             "net1.weight": dh.T @ x.astype(np.float64), "net1.bias": dh.sum(0)}
    return {k: w[k] - lr * grads[k] for k in w}, grads


def inputs(rows, cols=10, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (rows, cols)).astype(np.float32)


def test_styles_serialise_to_the_plan_file():
    plan = tessera.parallel.plan_json({
        "net*": ColwiseParallel(output_layouts=Replicate()),
        "out": RowwiseParallel(input_layouts=Shard(1), output_layouts=Shard(0), use_local_output=False),
        "norm": SequenceParallel(sequence_dim=0),
        "attn": PrepareModuleInput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None)),
        "sub": PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(0)),
    }, "tp")
    assert json.loads(plan) == {"mesh_dim": "tp", "plan": {
        "net*": {"style": "ColwiseParallel", "input_layouts": None, "output_layouts": "Replicate()",
                 "use_local_output": True},
        "out": {"style": "RowwiseParallel", "input_layouts": "Shard(1)", "output_layouts": "Shard(0)",
                "use_local_output": False},
        "norm": {"style": "SequenceParallel", "sequence_dim": 0, "use_local_output": False},
        "attn": {"style": "PrepareModuleInput", "input_layouts": ["Shard(0)", None],
                 "desired_input_layouts": ["Replicate()", None], "use_local_output": False},
        "sub": {"style": "PrepareModuleOutput", "output_layouts": "Replicate()",
                "desired_output_layouts": "Shard(0)", "use_local_output": True}}}
    assert json.loads(tessera.parallel.plan_json(RowwiseParallel()))["plan"][""]["style"] == "RowwiseParallel"
    assert json.loads(tessera.parallel.partition_json({"*.weight": Shard(0)}, 1)) == {
        "distribute": {"*.weight": ["Shard(0)"]}}
    with pytest.raises(tessera.InvalidArgument, match="one layout"):
        ColwiseParallel(input_layouts=(Shard(0), Shard(1)))
    with pytest.raises(tessera.Unimplemented, match="keyword"):
        PrepareModuleInput(input_kwarg_layouts={"x": Shard(0)})


def test_load_from_a_dict_a_file_and_a_seed(meshes, tmp_path):
    w = mlp_weights(1)
    x = inputs(5, seed=2)
    path = tmp_path / "mlp.safetensors"
    tessera.safetensors.write(path, w)
    spec_path = tmp_path / "mlp.json"
    spec_path.write_text(json.dumps(MLP_SPEC))
    for weights, spec in ((w, MLP_SPEC), (str(path), str(spec_path)), (path, json.dumps(MLP_SPEC))):
        m = tessera.load_module(spec, mesh=meshes["world"], weights=weights)
        np.testing.assert_allclose(m(x), mlp_forward(w, x)[0], **TOL)
        assert [fqn for fqn, _ in m.named_parameters()] == list(w)
        m.remove()
    m = tessera.load_module(MLP_SPEC, mesh=meshes["world"], seed=7)
    for fqn, t in m.state_dict().items():  # Linear's reset_parameters bounds
        bound = 1 / np.sqrt(10 if fqn.startswith("net1") else 16)
        assert np.abs(t).max() < bound and np.abs(t).max() > bound / 4, fqn
    with pytest.raises(tessera.InvalidArgument, match="net1.weight"):
        tessera.load_module(MLP_SPEC, mesh=meshes["world"], weights={**w, "net1.weight": w["net1.weight"].T})
    with pytest.raises(tessera.InvalidArgument, match="exactly one"):
        tessera.load_module(MLP_SPEC, mesh=meshes["world"])
    m.remove()


PLANS = {
    "megatron": ({"net1": ColwiseParallel(), "net2": RowwiseParallel()},
                 {"net1.weight": Shard(0), "net1.bias": Shard(0), "net2.weight": Shard(1),
                  "net2.bias": Replicate()}),
    "both_colwise": ({"net*": ColwiseParallel(output_layouts=Replicate())},
                     {"net1.weight": Shard(0), "net1.bias": Shard(0), "net2.weight": Shard(0),
                      "net2.bias": Shard(0)}),
}


@pytest.mark.parametrize("mesh_name", ["world", "grid"])
@pytest.mark.parametrize("plan", list(PLANS))
def test_parallelize_forward_and_step(meshes, mesh_name, plan):
    mesh = meshes[mesh_name]
    tp = mesh if mesh_name == "world" else mesh["tp"]
    w = mlp_weights(3)
    m = tessera.load_module(MLP_SPEC, mesh=mesh, weights=w)
    styles, placements = PLANS[plan]
    assert tessera.parallelize_module(m, tp, styles) is m
    for fqn, t in m.named_parameters():
        assert t.placements[tp.dims[0]] == placements[fqn], fqn
    assert m.unmatched == []
    x = inputs(8, seed=4)
    np.testing.assert_allclose(m(x), mlp_forward(w, x)[0], **TOL)
    step = m.step(x, lr=0.25)
    np.testing.assert_allclose(step.output, mlp_forward(w, x)[0], **TOL)
    assert step.loss == pytest.approx(mlp_forward(w, x)[0].sum(), rel=1e-5)
    after, grads = mlp_sgd(w, x, 0.25)
    for fqn, g in step.gradients.items():
        np.testing.assert_allclose(g.full_tensor(), grads[fqn], rtol=1e-4, atol=1e-4)
    state = m.state_dict()
    for fqn in w:
        np.testing.assert_allclose(state[fqn], after[fqn], rtol=1e-4, atol=1e-5)
    m.remove()


def test_empty_shards_in_module_programs(meshes):
    """A hidden width of 3 over the 4-rank mesh: colwise net1 leaves rank 3 no output features
    and rowwise net2 no input features (an [8, 0] x [0, 12] product); forward and a step as the
    unsharded MLP."""
    spec = {"type": "Module", "children": [
        {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 3},
        {"name": "relu", "type": "ReLU"},
        {"name": "net2", "type": "Linear", "in_features": 3, "out_features": 12}]}
    rng = np.random.default_rng(5)
    shapes = {"net1.weight": (3, 10), "net1.bias": (3,), "net2.weight": (12, 3), "net2.bias": (12,)}
    w = {k: rng.uniform(-1, 1, v).astype(np.float32) for k, v in shapes.items()}
    m = tessera.load_module(spec, mesh=meshes["world"], weights=w)
    tessera.parallelize_module(m, meshes["world"],
                               {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
    x = inputs(8, seed=6)

    def forward(w, x):
        h = x.astype(np.float64) @ w["net1.weight"].T + w["net1.bias"]
        return np.maximum(h, 0) @ w["net2.weight"].T + w["net2.bias"], h

    np.testing.assert_allclose(m(x), forward(w, x)[0], **TOL)
    step = m.step(x, lr=0.5)
    np.testing.assert_allclose(step.output, forward(w, x)[0], **TOL)
    y, h = forward(w, x)
    dh = (np.ones_like(y) @ w["net2.weight"]) * (h > 0)
    grads = {"net2.weight": np.ones_like(y).T @ np.maximum(h, 0), "net2.bias": np.full(12, 8.0),
             "net1.weight": dh.T @ x.astype(np.float64), "net1.bias": dh.sum(0)}
    state = m.state_dict()
    for fqn in w:
        np.testing.assert_allclose(state[fqn], w[fqn] - 0.5 * grads[fqn], rtol=1e-4, atol=1e-5)
    m.remove()


def test_unmatched_patterns_and_export_plan(meshes):
    m = tessera.load_module(MLP_SPEC, mesh=meshes["world"], seed=1, name="py-unmatched")
    tessera.parallelize_module(m, meshes["world"], {"net1": ColwiseParallel(), "nope*": RowwiseParallel()})
    assert m.unmatched == ["nope*"]
    plan = m.export_plan()
    assert plan["plan"]["net1"]["style"] == "ColwiseParallel"
    assert plan == m.plan
    m.remove()
    with pytest.raises(tessera.NotFound, match="py-unmatched"):
        m.show()


def test_sequence_parallel_and_megatron_blocks_match_the_unsharded_block(meshes):
    """The transformer block loaded from one seed three times: unsharded, Megatron's plan and
    the sequence-parallel plan; the outputs and a step's gradients agree."""
    mesh = meshes["world"]
    x = np.random.default_rng(5).uniform(-1, 1, (2, 4, 8))
    plain = tessera.load_module(BLOCK_SPEC, mesh=mesh, seed=11)
    megatron = tessera.load_module(BLOCK_SPEC, mesh=mesh, seed=11, plan={
        "attn.attention.[qkv]": ColwiseParallel(), "attn.attention.o": RowwiseParallel(),
        "mlp.net1": ColwiseParallel(), "mlp.net2": RowwiseParallel()})
    sequence = tessera.load_module(BLOCK_SPEC, mesh=mesh, seed=11)
    tessera.parallelize_module(sequence, mesh, {
        "attn.norm": SequenceParallel(),
        "attn.attention.[qkv]": ColwiseParallel(input_layouts=Shard(1)),
        "attn.attention.o": RowwiseParallel(output_layouts=Shard(1)),
        "mlp.norm": SequenceParallel(),
        "mlp.net1": ColwiseParallel(input_layouts=Shard(1)),
        "mlp.net2": RowwiseParallel(output_layouts=Shard(1))})
    out = sequence.forward(x, outputs="both")
    assert out.placement == Shard(1)
    expected = plain(x)
    assert expected.shape == (2, 4, 8)
    np.testing.assert_allclose(megatron(x), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.full, expected, rtol=1e-10, atol=1e-12)
    for rank in range(4):  # each rank holds its piece of the sequence
        np.testing.assert_allclose(out.locals[rank], expected[:, rank:rank + 1], rtol=1e-10, atol=1e-12)
    reference = plain.step(x).gradients
    for m in (megatron, sequence):
        for fqn, g in m.step(x).gradients.items():
            np.testing.assert_allclose(g.full_tensor(), reference[fqn].full_tensor(), rtol=1e-9,
                                       atol=1e-10, err_msg=fqn)
    for m in (plain, megatron, sequence):
        m.remove()


@pytest.mark.parametrize("world", ["world", "line3"])
def test_prepare_module_input_and_output(meshes, world):
    mesh = meshes[world]
    n = mesh.size()
    m = tessera.load_module(DUMMY_SPEC, mesh=mesh, weights={})
    tessera.parallelize_module(m, mesh, PrepareModuleInput(input_layouts=Shard(0),
                                                           desired_input_layouts=Replicate()))
    xs = [inputs(5, 7, seed=100 + r) for r in range(n)]
    y = m.forward(locals=xs, outputs="both")
    assert y.placement == Replicate() and y.is_dtensor
    np.testing.assert_array_equal(y.full, np.concatenate(xs))
    for r in range(n):
        np.testing.assert_array_equal(y.locals[r], np.concatenate(xs))
    m.remove()
    m = tessera.load_module(DUMMY_SPEC, mesh=mesh, weights={})
    tessera.parallelize_module(m, mesh, PrepareModuleOutput(output_layouts=Replicate(),
                                                            desired_output_layouts=Shard(0)))
    x = inputs(16, 7, seed=15)
    y = m.forward(x, outputs="both")
    assert y.placement == Shard(0) and not y.is_dtensor
    for r in range(n):
        np.testing.assert_array_equal(y.locals[r], np.array_split(x, n)[r] if n != 3 else
                                      x[[slice(0, 6), slice(6, 12), slice(12, 16)][r]])
    np.testing.assert_array_equal(y.full, x)
    m.remove()


def test_distribute_module(meshes):
    mesh = meshes["grid"]
    w = mlp_weights(6)
    m = tessera.load_module(MLP_SPEC, mesh=mesh, weights=w)
    tessera.distribute_module(m, mesh, {"net1.weight": [Shard(0), Shard(1)],
                                        "net2.*": [Replicate(), Shard(0)]})
    params = dict(m.named_parameters())
    assert params["net1.weight"].placements == (Shard(0), Shard(1))
    assert params["net1.bias"].placements == (Replicate(), Replicate())
    assert params["net2.bias"].placements == (Replicate(), Shard(0))
    x = inputs(6, seed=7)
    np.testing.assert_allclose(m(x), mlp_forward(w, x)[0], **TOL)
    with pytest.raises(tessera.Unimplemented):
        tessera.distribute_module(m, mesh, lambda name, module, mesh: None)
    m.remove()


def test_save_publish_and_infer(meshes, tmp_path):
    w = mlp_weights(8)
    m = tessera.load_module(MLP_SPEC, mesh=meshes["world"], weights=w, name="py-served",
                            plan={"net1": ColwiseParallel(), "net2": RowwiseParallel()})
    m.save(tmp_path / "saved.safetensors")
    saved = tessera.safetensors.read(tmp_path / "saved.safetensors")
    assert list(saved) == list(w)
    for k in w:
        np.testing.assert_array_equal(saved[k], w[k])
    published = m.publish("3", max_batch_size=8)
    assert (published.model, published.version, published.max_batch_size) == ("py-served", "3", 8)
    client = tessera.InferenceClient()
    assert client.server_live() and client.server_ready() and client.model_ready("py-served", "3")
    meta = client.model_metadata("py-served")
    assert [(i.name, i.datatype, list(i.shape)) for i in meta.inputs] == [("input", "FP32", [-1, 10])]
    x = inputs(3, seed=9)
    np.testing.assert_allclose(client.infer("py-served", x), mlp_forward(w, x)[0], **TOL)
    np.testing.assert_allclose(client.infer("py-served", x.astype(np.float64)), mlp_forward(w, x)[0], **TOL)
    with pytest.raises(tessera.InvalidArgument, match="max_batch_size 8"):
        client.infer("py-served", inputs(9))
    m.unpublish()
    assert not client.model_ready("py-served")
    m.remove()
    with pytest.raises(tessera.NotFound, match="py-served"):
        client.infer("py-served", x)
