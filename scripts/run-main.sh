#!/usr/bin/env bash
# Installs the dependencies, builds Tessera and runs its main job: `tessera demo`, which lays
# tensors out on device meshes, plans redistributions and checks each on a simulated mesh, and
# shards a tensor file to per-rank files, reshards and joins them back bit-identically.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_BENCH=OFF -DTESSERA_CUDA="${TESSERA_CUDA:-AUTO}" >/dev/null
cmake --build build/main --target tessera -j"$(nproc)"
exec ./build/main/client/tessera demo --workdir build/main/demo "$@"
