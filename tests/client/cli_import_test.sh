#!/usr/bin/env bash
# tessera module load of torch.export archives against a cluster of 4 workers started with
# `tessera up`: the Llama fixture (tests/fixtures/export, written by make_pt2.py) loaded with
# transformers' tp_plan and its Hugging Face checkpoint, shown (its program's edges, the modules
# the plan styled, each parameter's shards by state_dict name), run forward (the logits against
# the ones transformers computed, saved beside the fixture), listed and removed; GPT-2 with a
# parallelize_module plan and its archive's own weights likewise; a wrong input name, a spec-only
# flag and a training step refused with their messages.
# usage: cli_import_test.sh TESSERA_BINARY FIXTURES WORKDIR
set -euo pipefail
tessera="$1"
fixtures="$2"
work="$3"
rm -rf "${work}" && mkdir -p "${work}"

source "$(dirname "$0")/cli_common.sh"

# input_ids and logits of a fixture's .io.safetensors as .npy files; then a comparison.
"${py}" - "${fixtures}" "${work}" << 'PY'
import json, struct, sys
import numpy as np
fixtures, work = sys.argv[1], sys.argv[2]
for name in ("llama_hf", "gpt2"):
    raw = open(f"{fixtures}/{name}.io.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    for key, dtype in (("input_ids", np.int64), ("logits", np.float32)):
        e = header[key]
        a, b = e["data_offsets"]
        np.save(f"{work}/{name}.{key}.npy", np.frombuffer(data[a:b], dtype=dtype).reshape(e["shape"]))
PY
close() {
  "${py}" -c "
import sys, numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
assert got.shape == want.shape, (got.shape, want.shape)
np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
print('logits within rtol 1e-4, atol 1e-5 of transformers\'; largest difference', abs(got - want).max())
" "$1" "$2"
}

start_up --workers 4

# Llama with its own tp_plan and the checkpoint's weights, on the 4 workers.
"${tessera}" module load "${fixtures}/llama.pt2" --mesh world --name llama \
    --tp-plan "${fixtures}/llama.tp_plan.json" --weights "${fixtures}/llama_hf" > "${work}/load.txt"
cat "${work}/load.txt"
grep -q "program llama.pt2: [0-9]* nodes; a forward runs [1-9][0-9]* collectives" "${work}/load.txt" || fail "load names the program"
grep -q "input  input_ids *int64\[1, 6\] (R)" "${work}/load.txt" || fail "load shows the input"
grep -q "styled model.layers.0.self_attn.q_proj: colwise" "${work}/load.txt" || fail "load shows q_proj styled"
grep -Eq "model.layers.0.self_attn.q_proj.weight float32\[8, 8\] \(S\(0\)\)" "${work}/load.txt" || fail "q_proj sharded by rows"
grep -Eq "model.layers.0.self_attn.o_proj.weight float32\[8, 8\] \(S\(1\)\)" "${work}/load.txt" || fail "o_proj sharded by columns"
grep -q "rank 3: *local \[2, 8\] at offset \[6, 0\]" "${work}/load.txt" || fail "rank 3's shard of q_proj"
"${tessera}" module forward llama --input "input_ids=${work}/llama_hf.input_ids.npy" --out "${work}/llama.npy"
close "${work}/llama.npy" "${work}/llama_hf.logits.npy"
"${tessera}" module show llama > "${work}/show.txt"
grep -q "program llama.pt2" "${work}/show.txt" || fail "show"
"${tessera}" module list > "${work}/list.txt"
grep -q "^llama .* plan .*program llama.pt2" "${work}/list.txt" || { cat "${work}/list.txt"; fail "list"; }

# Refusals: an input the program lacks, a spec's flag on a program, a training step.
expect_exit 1 module forward llama --input "x=${work}/llama_hf.input_ids.npy" --out "${work}/no.npy"
grep -q "has no input 'x'" "${work}/err.txt" || { cat "${work}/err.txt"; fail "unknown input"; }
expect_exit 1 module load "${fixtures}/llama.pt2" --mesh world --name again --seed 3
grep -q "is a program: its weights come from the archive" "${work}/err.txt" || { cat "${work}/err.txt"; fail "seed on a program"; }
expect_exit 1 module step llama --input "${work}/llama_hf.input_ids.npy"
grep -q "FAILED_PRECONDITION: module 'llama' is imported from a program" "${work}/err.txt" || { cat "${work}/err.txt"; fail "step"; }

# --tp-plan hf: a checkpoint whose config.json carries its base_model_tp_plan (relative to the
# base model, "model" for model_type llama) lays it out.
cp -r "${fixtures}/llama_hf" "${work}/llama_hf_plan"
"${py}" - "${work}/llama_hf_plan/config.json" "${fixtures}/llama.tp_plan.json" << 'PY'
import json, sys
config, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
config["base_model_tp_plan"] = {k[len("model."):]: v for k, v in plan.items() if k.startswith("model.")}
json.dump(config, open(sys.argv[1], "w"))
PY
"${tessera}" module load "${fixtures}/llama.pt2" --mesh world --name llama_hf_plan --tp-plan hf \
    --weights "${work}/llama_hf_plan" > "${work}/hf_plan.txt"
grep -q "styled model.layers.0.self_attn.q_proj: colwise" "${work}/hf_plan.txt" || { cat "${work}/hf_plan.txt"; fail "--tp-plan hf"; }
"${tessera}" module forward llama_hf_plan --input "${work}/llama_hf.input_ids.npy" --out "${work}/hf_plan.npy"
close "${work}/hf_plan.npy" "${work}/llama_hf.logits.npy"
"${tessera}" module rm llama_hf_plan

# GPT-2 with a parallelize_module plan, on the archive's own weights (the Conv1D sharded as the
# transposed Linear it is).
cat > "${work}/gpt2_plan.json" << 'JSON'
{"plan": {"transformer.h.*.mlp.c_fc": "ColwiseParallel",
          "transformer.h.*.mlp.c_proj": "RowwiseParallel",
          "lm_head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}}
JSON
"${tessera}" module load "${fixtures}/gpt2.pt2" --mesh world --name gpt2 --plan "${work}/gpt2_plan.json" > "${work}/gpt2.txt"
grep -Eq "transformer.h.0.mlp.c_fc.weight float32\[[0-9]+, [0-9]+\] \(S\(1\)\)" "${work}/gpt2.txt" || { cat "${work}/gpt2.txt"; fail "c_fc's weight sharded on its output dim"; }
"${tessera}" module forward gpt2 --input "${work}/gpt2.input_ids.npy" --out "${work}/gpt2.npy"
close "${work}/gpt2.npy" "${work}/gpt2.logits.npy"

"${tessera}" module rm llama gpt2
"${tessera}" module list > "${work}/list.txt"
grep -q "no modules" "${work}/list.txt" || { cat "${work}/list.txt"; fail "removed"; }
echo "cli_import: OK"
