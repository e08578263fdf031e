#!/usr/bin/env bash
# Runs bench/module_bench: an MLP's forward and training step and a transformer block's forward
# through the service (2 CPU workers, one BLAS thread each) next to the same computation in the
# bench process on one BLAS thread and, when a Python with torch is found ($TORCH_PYTHON, else
# python3), torch's parallelize_module on gloo (bench/torch_tp_peer.py); then ModelInfer on the
# KServe v2 endpoint at 1, 4 and 16 clients with and without dynamic batching.
#
# usage: [TESSERA_BENCH_RT=1] bench/run_module.sh [BUILD_DIR] [extra module_bench flags...]
#        (BUILD_DIR defaults to build; the JSON goes to BUILD_DIR/bench/results/module.json)
# quick check: bench/run_module.sh BUILD_DIR --iterations=3 --rounds=1 --block_iterations=1 \
#              --infer_seconds=0.5 --torch_iterations=5
#
# TESSERA_BENCH_RT=1 runs the bench and every process it starts at SCHED_RR priority 1 (chrt -r 1,
# needs CAP_SYS_NICE), as bench/run_collectives.sh explains.
set -euo pipefail

build_dir="${1:-build}"
shift || true
bench="${build_dir}/bench/module_bench"
if [[ ! -x "${bench}" ]]; then
  echo "no ${bench}; build it first: cmake --build ${build_dir} --target module_bench" >&2
  exit 1
fi
results="${build_dir}/bench/results"
mkdir -p "${results}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "${here}/bench_env.sh"
bench_torch_flags torch.distributed.tensor.parallel "${here}/torch_tp_peer.py"
bench_preamble
# One BLAS thread everywhere: the bench's single-process yardstick, the workers it starts (OpenBLAS
# reads the variable as it loads) and torch's peer.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"${launch[@]}" "${bench}" --json="${results}/module.json" "${torch_flags[@]}" "$@"
echo "JSON: ${results}/module.json"
