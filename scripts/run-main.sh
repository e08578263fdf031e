#!/usr/bin/env bash
# Installs the dependencies, builds Tessera and runs its main job:
#   1. `tessera demo`: lays tensors out on device meshes, plans redistributions and checks each on a
#      simulated mesh, and shards a tensor file to per-rank files and joins it back bit-identically;
#   2. `tessera import plan`: reads a Llama exported by torch.export (a tiny one from transformers,
#      tests/fixtures/export/) with the weights of a Hugging Face checkpoint, lays it out by
#      transformers' own tp_plan and plans the whole graph on 4 ranks in one propagation pass;
#   3. `tessera up --selfcheck`: starts an embedded local cluster (a coordinator and 4 CPU worker
#      processes on loopback), runs collectives on it through the service, checks every rank's
#      result against a single-process reference, runs a DTensor MLP, saves a result as a sharded
#      checkpoint and loads it onto another mesh and layout, then takes a transformer block as a
#      user brings it (a spec file, safetensors weights, a Megatron plan file): loads it onto 4
#      workers, parallelizes it, runs it forward, publishes it and calls it over the KServe v2
#      inference protocol, trains it one SGD step, compares each with one process, prints what
#      every daemon's Prometheus /metrics counted; then the Llama of step 2 loaded onto 4 workers as
#      `tessera module load llama.pt2` loads it (its program read on the coordinator, laid out by
#      the tp_plan, the checkpoint's weights streamed to their shards), run forward with one
#      command per worker, its logits compared with one process and with transformers' own, and
#      stops.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_BENCH=OFF -DTESSERA_CUDA="${TESSERA_CUDA:-AUTO}" >/dev/null
cmake --build build/main --target tessera -j"$(nproc)"
./build/main/client/tessera demo --workdir build/main/demo
echo
fixtures=tests/fixtures/export
./build/main/client/tessera import plan "$fixtures/llama.pt2" --mesh 4 \
  --tp-plan "$fixtures/llama.tp_plan.json" --weights "$fixtures/llama_hf"
echo
exec ./build/main/client/tessera up --workers 4 --selfcheck \
  --selfcheck-model "$fixtures/llama.pt2" --selfcheck-model-inputs "$fixtures/llama_hf.io.safetensors" \
  --selfcheck-model-tp-plan "$fixtures/llama.tp_plan.json" --selfcheck-model-weights "$fixtures/llama_hf"
