#!/usr/bin/env bash
# Runs bench/local_bench once per OpenBLAS thread count (1, then 2) and keeps one JSON per run.
# OpenBLAS reads OPENBLAS_NUM_THREADS when the library loads, so it must be in the environment
# before the process starts; this script is where it is set.
#
# usage: bench/run_local.sh [BUILD_DIR] [extra local_bench flags...]   (BUILD_DIR defaults to build)
set -euo pipefail

build_dir="${1:-build}"
shift || true
bench="${build_dir}/bench/local_bench"
results="${build_dir}/bench/results"
if [[ ! -x "${bench}" ]]; then
  echo "no ${bench}; build it first: ninja -C ${build_dir} local_bench" >&2
  exit 1
fi
mkdir -p "${results}"
for threads in 1 2; do
  echo "== OPENBLAS_NUM_THREADS=${threads}"
  OPENBLAS_NUM_THREADS="${threads}" "${bench}" --json="${results}/local_openblas${threads}.json" "$@"
  echo
done
