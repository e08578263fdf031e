#!/usr/bin/env bash
# Installs the dependencies, builds every target with warnings as errors (CUDA kernels too when
# nvcc and NCCL are found; GPU tests skip without a device), runs every test with ctest, then
# each fuzz target for 20 seconds, then the core tests under ASan and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
# How long each step took, said as it ends (CI's budget is the sum).
step() { echo "run-tests: $1 took $((SECONDS - ${2:-0})) s (${SECONDS} s in all)"; }
./scripts/install-deps.sh
./scripts/check-format.sh
step "installing and the format check"
t=$SECONDS
jobs="$(nproc)"
cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON \
  -DTESSERA_CUDA="${TESSERA_CUDA:-AUTO}"
cmake --build build/test -j"$jobs"
if grep -q '^TESSERA_WITH_CUDA_BUILT:INTERNAL=ON' build/test/CMakeCache.txt; then
  # The CUDA variant is the main build here; compile the CPU-only variant of the kernels as well,
  # so that neither side of the #if breaks unnoticed.
  cmake -S . -B build/cpu-only -G Ninja -DTESSERA_WERROR=ON -DTESSERA_CUDA=OFF \
    -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
  cmake --build build/cpu-only --target tessera_kernels -j"$jobs"
fi
step "the build" "$t"
t=$SECONDS
ctest --test-dir build/test --output-on-failure -j"$jobs" --timeout 900
step "ctest" "$t"
t=$SECONDS
# Every fuzz target under libFuzzer with ASan and UBSan (a clang build in build/fuzz), a short run
# each; scripts/run-fuzz.sh SECONDS is the long run.
./scripts/run-fuzz.sh "${TESSERA_FUZZ_SECONDS:-20}"
step "the fuzz build and runs" "$t"
t=$SECONDS
# The core tests (the sharding model, the planners, the file formats: ctest label core) under ASan
# and UBSan in that same clang build, which compiles nothing else of the service for them.
./scripts/run-sanitizers.sh core
step "the sanitizer build and core tests" "$t"
