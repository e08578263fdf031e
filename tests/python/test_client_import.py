"""torch.export archives through the Python client, without torch: load_module("model.pt2")
with the fixtures of tests/fixtures/export (tiny Llama, Qwen2, GPT-2 and BERT from transformers,
written by make_pt2.py) laid out by their own tp_plan or a parallelize_module plan, weights from
the archive or the Hugging Face checkpoint beside it; module(input_ids) against the logits
transformers computed (rtol 1e-4, atol 1e-5); state_dict by PyTorch's names; bad archives,
checkpoints, plans and inputs refused with their errors, nothing loaded."""

import json
import pathlib
import shutil

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import safetensors as st  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "export"
PLANS = {
    "gpt2": {"transformer.h.*.mlp.c_fc": "ColwiseParallel",
             "transformer.h.*.mlp.c_proj": "RowwiseParallel",
             "lm_head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}},
    "bert": {"bert.encoder.layer.*.attention.self.query": "ColwiseParallel",
             "bert.encoder.layer.*.attention.self.key": "ColwiseParallel",
             "bert.encoder.layer.*.attention.self.value": "ColwiseParallel",
             "bert.encoder.layer.*.attention.output.dense": "RowwiseParallel"},
}


def io(name):
    return st.read(FIXTURES / f"{name}.io.safetensors")


@pytest.mark.parametrize("model", ["llama", "qwen2"])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_tp_plan_logits_equal_transformers(session, meshes, model, checkpoint):
    tp_plan = json.loads((FIXTURES / f"{model}.tp_plan.json").read_text())
    m = tessera.load_module(FIXTURES / f"{model}.pt2", mesh=meshes["world"], tp_plan=tp_plan,
                            weights=FIXTURES / f"{model}_hf" if checkpoint else None,
                            name=f"py-{model}-{int(checkpoint)}")
    try:
        assert m.imported.source == f"{model}.pt2"
        assert [e.name for e in m.imported.inputs] == ["input_ids"]
        placements = {p.fqn: list(p.meta.placements) for p in m.info.parameters}
        assert placements["model.layers.0.self_attn.q_proj.weight"][0].HasField("shard")
        want = io(f"{model}_hf" if checkpoint else model)
        got = m(want["input_ids"])
        np.testing.assert_allclose(got, want["logits"], rtol=1e-4, atol=1e-5)
    finally:
        m.remove()


@pytest.mark.parametrize("model", ["gpt2", "bert"])
@pytest.mark.parametrize("mesh", ["world", "grid"])
def test_torch_plan_logits_equal_transformers(session, meshes, model, mesh):
    m = tessera.load_module(str(FIXTURES / f"{model}.pt2"), mesh=meshes[mesh],
                            plan=PLANS[model], name=f"py-{model}-{mesh}")
    try:
        want = io(model)
        np.testing.assert_allclose(m(want["input_ids"]), want["logits"], rtol=1e-4, atol=1e-5)
        # state_dict: the archive's own weights, by PyTorch's names.
        state = m.state_dict()
        assert "lm_head.weight" in state or "cls.predictions.decoder.weight" in state
    finally:
        m.remove()


def test_bad_archives_checkpoints_and_inputs_are_refused(session, meshes, tmp_path):
    before = {m.name for m in tessera.list_modules()}
    with pytest.raises(tessera.InvalidArgument, match="not a zip"):
        bogus = tmp_path / "bogus.pt2"
        bogus.write_bytes(b"not a zip")
        tessera.load_module(bogus, mesh=meshes["world"], name="bad")
    # A checkpoint that lacks a parameter.
    broken = tmp_path / "llama_hf"
    shutil.copytree(FIXTURES / "llama_hf", broken)
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    lost = sorted(index["weight_map"])[0]
    file = broken / index["weight_map"][lost]
    tensors = st.read(file)
    del tensors[lost]
    st.write(file, tensors)
    del index["weight_map"][lost]
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(tessera.InvalidArgument, match=lost):
        tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"], weights=broken,
                            name="bad")
    # A style on a module it cannot style, and an unknown style string.
    with pytest.raises(tessera.InvalidArgument, match="model.norm"):
        tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"],
                            tp_plan={"model.norm": "colwise"}, name="bad")
    with pytest.raises(tessera.InvalidArgument, match="sideways"):
        tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"],
                            tp_plan={"model.layers.*.mlp.up_proj": "sideways"}, name="bad")
    with pytest.raises(tessera.InvalidArgument, match="a program"):
        tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"], seed=1, name="bad")
    assert {m.name for m in tessera.list_modules()} == before
    m = tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"], name="py-llama-inputs")
    try:
        ids = io("llama")["input_ids"]
        with pytest.raises(tessera.InvalidArgument, match="input 'input_ids'.*static"):
            m(ids[:, :3])
        with pytest.raises(tessera.InvalidArgument, match="takes 1 input"):
            m(ids, ids)
        np.testing.assert_allclose(m(ids), io("llama")["logits"], rtol=1e-4, atol=1e-5)
    finally:
        m.remove()


def test_the_checkpoints_own_plan(session, meshes, tmp_path):
    """tp_plan="hf": config.json's base_model_tp_plan, relative to the base model ("model")."""
    ckpt = tmp_path / "llama_hf"
    shutil.copytree(FIXTURES / "llama_hf", ckpt)
    with pytest.raises(tessera.InvalidArgument, match="carries no base_model_tp_plan"):
        tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"], tp_plan="hf",
                            weights=ckpt, name="bad")
    config = json.loads((ckpt / "config.json").read_text())
    plan = json.loads((FIXTURES / "llama.tp_plan.json").read_text())
    config["base_model_tp_plan"] = {k[len("model."):]: v for k, v in plan.items()
                                    if k.startswith("model.")}
    (ckpt / "config.json").write_text(json.dumps(config))
    m = tessera.load_module(FIXTURES / "llama.pt2", mesh=meshes["world"], tp_plan="hf",
                            weights=ckpt, name="py-llama-hf-plan")
    try:
        assert any(s.startswith("model.layers.0.self_attn.q_proj: colwise") for s in m.imported.styled)
        want = io("llama_hf")
        np.testing.assert_allclose(m(want["input_ids"]), want["logits"], rtol=1e-4, atol=1e-5)
    finally:
        m.remove()
