#!/usr/bin/env bash
# Runs bench/collectives_bench: collectives through the service next to raw Gloo and, when a
# Python with torch is found ($TORCH_PYTHON, else python3), torch.distributed on gloo.
#
# usage: [TESSERA_BENCH_RT=1] bench/run_collectives.sh [BUILD_DIR] [extra collectives_bench flags...]
#        (BUILD_DIR defaults to build; the JSON goes to BUILD_DIR/bench/results/collectives.json)
#
# On a shared, oversubscribed machine a woken thread can wait a whole scheduler tick (4 ms at
# HZ=250) for a core, which swamps the 40 us of a 4 KiB Gloo collective. TESSERA_BENCH_RT=1 runs
# the bench and every process it starts (cluster, peers) at SCHED_RR priority 1 (chrt -r 1, needs
# CAP_SYS_NICE) so the figures measure the software rather than the scheduler; it takes the cores
# from other work for the minutes the run lasts.
set -euo pipefail

build_dir="${1:-build}"
shift || true
bench="${build_dir}/bench/collectives_bench"
if [[ ! -x "${bench}" ]]; then
  echo "no ${bench}; build it first:" \
       "ninja -C ${build_dir} collectives_bench raw_gloo_peer tessera-coordinator tessera-worker" >&2
  exit 1
fi
results="${build_dir}/bench/results"
mkdir -p "${results}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "${here}/bench_env.sh"
bench_torch_flags torch "${here}/torch_peer.py"
bench_preamble
"${launch[@]}" "${bench}" --json="${results}/collectives.json" "${torch_flags[@]}" "$@"
echo "JSON: ${results}/collectives.json"
