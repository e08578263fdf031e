#!/usr/bin/env bash
# Runs bench/dtensor_bench: distribute_tensor, full_tensor, a tiny add and redistribute through the
# service next to a raw gRPC server, raw Gloo and, when a Python with torch is found
# ($TORCH_PYTHON, else python3), torch DTensor on gloo.
#
# usage: [TESSERA_BENCH_RT=1] bench/run_dtensor.sh [BUILD_DIR] [extra dtensor_bench flags...]
#        (BUILD_DIR defaults to build; the JSON goes to BUILD_DIR/bench/results/dtensor.json)
# quick check: bench/run_dtensor.sh BUILD_DIR --transfer_bytes=16777216 --memory_bytes=67108864 \
#              --redistribute_bytes=4194304 --latency_iterations=100 --pipelined_ops=100 --rounds=1
#
# TESSERA_BENCH_RT=1 runs the bench and every process it starts at SCHED_RR priority 1 (chrt -r 1,
# needs CAP_SYS_NICE), as bench/run_collectives.sh explains.
set -euo pipefail

build_dir="${1:-build}"
shift || true
bench="${build_dir}/bench/dtensor_bench"
if [[ ! -x "${bench}" ]]; then
  echo "no ${bench}; build it first: cmake --build ${build_dir} --target dtensor_bench" >&2
  exit 1
fi
results="${build_dir}/bench/results"
mkdir -p "${results}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "${here}/bench_env.sh"
bench_torch_flags torch.distributed.tensor "${here}/torch_dtensor_peer.py"
bench_preamble
"${launch[@]}" "${bench}" --json="${results}/dtensor.json" "${torch_flags[@]}" "$@"
echo "JSON: ${results}/dtensor.json"
