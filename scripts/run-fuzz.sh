#!/usr/bin/env bash
# The fuzz targets (fuzz/) under libFuzzer with ASan and UBSan, built with Debian's clang in
# build/fuzz.
#
#   scripts/run-fuzz.sh [SECONDS]
#       Builds every <name>_fuzzer and runs each for SECONDS (default 600) from its seed corpus,
#       as many at once as there are cores. New inputs stay in build/fuzz/fuzz/runs/<name>/new; a
#       crash leaves its input in build/fuzz/fuzz/runs/<name>/crashes and fails the run. A crash
#       found becomes a regression: copy the input to fuzz/regressions/<name>/ (every build replays
#       it, fuzz_replay_<name>) and fix the code.
#   scripts/run-fuzz.sh --one FUZZER WORKDIR SECONDS INPUT...
#       One target's run, as ctest calls it.
set -euo pipefail

if [ "${1:-}" = "--one" ]; then
  fuzzer="$2" work="$3" seconds="$4"
  shift 4
  rm -rf "$work/new" && mkdir -p "$work/new" "$work/crashes"
  status=0
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -artifact_prefix="$work/crashes/" -print_final_stats=1 "$work/new" "$@" 2>"$work/log" ||
    status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$work/log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$work/log"
    echo "run-fuzz: $(basename "$fuzzer") failed; the input is in $work/crashes:" \
      "$(ls "$work/crashes")" >&2
  fi
  exit "$status"
fi

cd "$(dirname "$0")/.."
seconds="${1:-600}"
targets=(npy safetensors pt2 exported_program module_spec plan_spec placement_mesh proto_convert)
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DTESSERA_FUZZ=ON -DTESSERA_CUDA=OFF -DTESSERA_BUILD_BENCH=OFF \
  -DTESSERA_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build build/fuzz -j"$(nproc)" --target "${targets[@]/%/_fuzzer}"
ctest --test-dir build/fuzz -L fuzz -j"$(nproc)" --output-on-failure --timeout "$((seconds + 300))"
