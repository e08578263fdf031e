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

torch_flags=()
python="${TORCH_PYTHON:-python3}"
if "${python}" -c "import torch" 2>/dev/null; then
  torch_flags=(--torch_python="$(command -v "${python}")" --torch_peer="${here}/torch_peer.py")
else
  echo "no torch in ${python}: torch.distributed is not measured (set TORCH_PYTHON)" >&2
fi

echo "date: $(date)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
launch=()
if [[ "${TESSERA_BENCH_RT:-0}" == 1 ]]; then
  launch=(chrt -r 1)
  echo "scheduling: SCHED_RR priority 1 (TESSERA_BENCH_RT=1)"
else
  echo "scheduling: default (TESSERA_BENCH_RT=1 for SCHED_RR on a busy machine)"
fi
"${launch[@]}" "${bench}" --json="${results}/collectives.json" "${torch_flags[@]}" "$@"
echo "JSON: ${results}/collectives.json"
