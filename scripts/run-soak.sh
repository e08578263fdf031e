#!/usr/bin/env bash
# The full concurrency soak (bench/soak.cc) against a local 4-worker cluster, built in build/test
# as CI configures it: 16 clients x 1000 mixed calls each, steady (memory back to baseline), with a
# worker killed and restarted mid-run, and with the coordinator killed and restarted mid-run from
# its state directory (every tensor acknowledged before must read back after). The report goes to
# stdout and to build/test/bench/soak.log; exit status 1 on any unexpected outcome, 2 on a
# deadlock.
#
#   scripts/run-soak.sh [SOAK FLAGS...]
#       e.g. --clients=8 --calls=200, --seed=7, or --phases=steady to run one phase.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/test
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
cmake --build "$build" -j"$(nproc)" --target soak tessera-coordinator tessera-worker
"$build/bench/soak" --clients=16 --calls=1000 --phases=steady,worker,coordinator "$@" 2>&1 |
  tee "$build/bench/soak.log"
exit "${PIPESTATUS[0]}"
