# Shared by the bench/run_*.sh runners (sourced, not run).

# Sets torch_flags to pass a Python with torch (one that can `import MODULE`) and the peer script
# PEER to the bench, or leaves it empty with a note. $TORCH_PYTHON, else python3.
bench_torch_flags() {
  local module="$1" peer="$2" python="${TORCH_PYTHON:-python3}"
  torch_flags=()
  if "${python}" -c "import ${module}" 2>/dev/null; then
    torch_flags=(--torch_python="$(command -v "${python}")" --torch_peer="${peer}")
  else
    echo "no ${module} in ${python}: torch is not measured (set TORCH_PYTHON)" >&2
  fi
}

# Prints date, machine and load, and sets `launch` to the command prefix that runs the bench:
# chrt -r 1 (SCHED_RR priority 1) when TESSERA_BENCH_RT=1, else nothing.
bench_preamble() {
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
}
