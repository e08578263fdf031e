"""Models from transformers, exported with torch.export and saved with save_pretrained here, run by
`tessera import run` on simulated meshes with their own tp_plan and with torchtitan-style
parallelize_module plans, and loaded onto the cluster with tessera.load_module: the logits equal
transformers' within fp32 tolerance. Needs torch and transformers (PyPI); skips without them."""

import json
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: no peer to compare with")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

CLI = os.environ.get("TESSERA_CLI", "tessera")

SMALL = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=32)


def models():
    tf = transformers
    return {
        # Grouped-query attention: 4 query heads, 2 KV heads (fewer than 4 ranks).
        "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(**SMALL, num_key_value_heads=2, use_cache=False)),
        "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config(**SMALL, num_key_value_heads=2, use_cache=False)),
        "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                                   n_positions=32, use_cache=False)),
        "bert": (tf.BertForMaskedLM, tf.BertConfig(**SMALL)),
    }


TORCH_PLANS = {
    "llama": {"model.embed_tokens": {"style": "RowwiseParallel", "input_layouts": "Replicate()"},
              "model.layers.*.self_attn.q_proj": "ColwiseParallel",
              "model.layers.*.self_attn.k_proj": "ColwiseParallel",
              "model.layers.*.self_attn.v_proj": "ColwiseParallel",
              "model.layers.*.self_attn.o_proj": "RowwiseParallel",
              "model.layers.*.mlp.gate_proj": "ColwiseParallel",
              "model.layers.*.mlp.up_proj": "ColwiseParallel",
              "model.layers.*.mlp.down_proj": "RowwiseParallel",
              "lm_head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}},
    "gpt2": {"transformer.h.*.attn.c_proj": "RowwiseParallel",
             "transformer.h.*.mlp.c_fc": "ColwiseParallel",
             "transformer.h.*.mlp.c_proj": "RowwiseParallel",
             "lm_head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}},
    "bert": {"bert.encoder.layer.*.attention.self.query": "ColwiseParallel",
             "bert.encoder.layer.*.attention.self.key": "ColwiseParallel",
             "bert.encoder.layer.*.attention.self.value": "ColwiseParallel",
             "bert.encoder.layer.*.attention.output.dense": "RowwiseParallel",
             "bert.encoder.layer.*.intermediate.dense": "ColwiseParallel",
             "bert.encoder.layer.*.output.dense": "RowwiseParallel",
             "cls.predictions.decoder": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}},
}
TORCH_PLANS["qwen2"] = TORCH_PLANS["llama"]


@pytest.fixture(scope="module", params=sorted(models()))
def exported(request, tmp_path_factory):
    name = request.param
    cls, config = models()[name]
    torch.manual_seed(7)
    model = cls(config).eval()
    ids = torch.randint(0, 64, (2, 5))
    d = tmp_path_factory.mktemp(name)
    torch.export.save(torch.export.export(model, (ids,)), str(d / "model.pt2"))
    model.save_pretrained(str(d / "hf"))
    np.save(d / "ids.npy", ids.numpy())
    with torch.no_grad():
        want = model(ids).logits.numpy()
    if model.tp_plan:
        (d / "tp_plan.json").write_text(json.dumps(dict(model.tp_plan)))
    (d / "plan.json").write_text(json.dumps({"plan": TORCH_PLANS[name]}))
    return name, d, want


def run(d, *args):
    out = d / "out.npy"
    subprocess.run([CLI, "import", "run", str(d / "model.pt2"), "--weights", str(d / "hf"),
                    "--input", str(d / "ids.npy"), "--out", str(out), *args],
                   check=True, capture_output=True, text=True)
    return np.load(out)


@pytest.mark.parametrize("mesh", [["--mesh", "2"], ["--mesh", "4"], ["--mesh", "2,2", "--mesh-dim", "1"]])
@pytest.mark.parametrize("plan", ["tp_plan", "torch"])
def test_logits_equal_transformers(exported, mesh, plan):
    name, d, want = exported
    if plan == "tp_plan":
        if not (d / "tp_plan.json").exists():
            pytest.skip(f"{name} has no tp_plan in transformers")
        args = ["--tp-plan", str(d / "tp_plan.json")]
    else:
        args = ["--plan", str(d / "plan.json")]
    got = run(d, *mesh, *args)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_one_rank_equals_transformers(exported):
    name, d, want = exported
    np.testing.assert_allclose(run(d, "--mesh", "1"), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mesh", ["world", "grid"])
@pytest.mark.parametrize("plan", ["tp_plan", "torch"])
def test_on_the_cluster_logits_equal_transformers(exported, session, meshes, mesh, plan):
    """The archive loaded onto the cluster (tessera.load_module("model.pt2")) with the checkpoint's
    weights: one graph program per worker gives transformers' logits."""
    tessera = pytest.importorskip("tessera", reason="build the tessera_python target")
    name, d, want = exported
    if plan == "tp_plan" and not (d / "tp_plan.json").exists():
        pytest.skip(f"{name} has no tp_plan in transformers")
    layout = ({"tp_plan": json.loads((d / "tp_plan.json").read_text())} if plan == "tp_plan"
              else {"plan": TORCH_PLANS[name]})
    m = tessera.load_module(d / "model.pt2", mesh=meshes[mesh], weights=d / "hf",
                            name=f"peer-{name}-{mesh}-{plan}", **layout)
    try:
        got = m(np.load(d / "ids.npy"))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    finally:
        m.remove()


def test_export_and_load_a_torch_module(session, meshes, tmp_path):
    """tessera.export(module, example_inputs, path) and load_module(module, example_inputs=...):
    a transformers model straight from its object, its own weights, with its tp_plan."""
    tessera = pytest.importorskip("tessera", reason="build the tessera_python target")
    cls, config = models()["llama"]
    torch.manual_seed(3)
    model = cls(config).eval()
    ids = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        want = model(ids).logits.numpy()
    path = tessera.export(model, (ids,), tmp_path / "llama.pt2")
    assert path.exists()
    m = tessera.load_module(path, mesh=meshes["world"], tp_plan=dict(model.tp_plan),
                            name="peer-exported")
    try:
        np.testing.assert_allclose(m(ids.numpy()), want, rtol=1e-4, atol=1e-5)
    finally:
        m.remove()
    m = tessera.load_module(model, example_inputs=(ids,), mesh=meshes["grid"],
                            tp_plan=dict(model.tp_plan), mesh_dim=1, name="peer-direct")
    try:
        np.testing.assert_allclose(m(ids.numpy()), want, rtol=1e-4, atol=1e-5)
    finally:
        m.remove()
