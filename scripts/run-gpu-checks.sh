#!/usr/bin/env bash
# The GPU checks of the CUDA variant: the kernel conformance suite, the CUDA-against-CPU kernel
# suite and the op registry's suite (every op over meshes x placements x shards on the simulated
# mesh, and the hand-worked formulas) on cuda:0, the NCCL communicator suite (every collective x dtype x reduce op, on 1 to 4
# ranks as GPUs allow), the worker's command executor and module programs with every rank on a GPU,
# the DTensor and module cluster suites on a cuda mesh (4 GPUs), and `tessera up --device cuda
# --selfcheck`; then a summary of what ran, on what, and how it went. With TESSERA_GPU_BENCH=1,
# `run` also measures: collectives through the service against raw NCCL (collectives_bench
# --device=cuda, raw_nccl_peer) and distribute / full_tensor / redistribute on a cuda mesh against a
# raw gRPC stream and raw NCCL (dtensor_bench --device=cuda), and the tensor-parallel MLP and
# transformer block on GPU workers against one GPU running the same kernels (module_bench
# --device=cuda); their tables are in the logs.
#
# It runs where the GPU is, which need not have a compiler, Debian's -dev packages or a network:
#
#   scripts/run-gpu-checks.sh bundle [BUILD_DIR] [OUT_DIR]
#       On the build machine. Builds the CUDA variant's check binaries in BUILD_DIR (default
#       build/gpu, configured with -DTESSERA_CUDA=ON if it is not yet), copies them, stripped, into
#       OUT_DIR (default build/gpu-checks) with every shared library `ldd` names except glibc's and
#       the GPU stack (libcuda, libcudart, libcublas, libcublasLt, libnccl), which must come from the
#       GPU machine, and packs OUT_DIR.tar.xz.
#   scripts/run-gpu-checks.sh run [OUT_DIR | OUT_DIR.tar.xz]
#       On the GPU machine. Finds the machine's CUDA runtime, cuBLAS and NCCL libraries (in
#       $CUDA_HOME, /usr/local/cuda*, the system library dirs, or pip's nvidia-* packages), checks
#       that every binary loads, lists the GPUs and runs the suites. Exit status 0 when every suite
#       that could run passed, 1 when one failed, 2 when nothing could run (no GPU, missing
#       libraries).
#   scripts/run-gpu-checks.sh
#       Both on one machine that has the GPU and the build dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

# The binaries the checks run.
tests=(cuda_kernels_test cuda_vs_cpu_test aten_ops_test communicator_test command_executor_test
  program_runner_test cluster_dtensor_test cluster_module_test)
daemons=(tessera-worker tessera-coordinator tessera)
# The benchmarks and their yardsticks (bench/), run with TESSERA_GPU_BENCH=1.
benches=(collectives_bench dtensor_bench module_bench raw_nccl_peer raw_grpc_peer)
# Libraries the GPU machine provides: the driver, the CUDA runtime, cuBLAS and NCCL.
gpu_stack='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]'
# glibc's libraries, which must match the machine's dynamic loader.
glibc='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl)[.-]'

bundle() {
  local build="${1:-build/gpu}" out="${2:-build/gpu-checks}"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON \
      -DTESSERA_CUDA=ON
  fi
  grep -q '^TESSERA_WITH_CUDA_BUILT:INTERNAL=ON' "$build/CMakeCache.txt" || {
    echo "run-gpu-checks: $build is not a CUDA build (configure it with -DTESSERA_CUDA=ON)" >&2
    exit 2
  }
  cmake --build "$build" -j"$(nproc)" --target "${tests[@]}" "${daemons[@]}" "${benches[@]}"
  rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
  local f
  for f in "${tests[@]}"; do cp "$build/tests/$f" "$out/bin/"; done
  for f in "${benches[@]}"; do cp "$build/bench/$f" "$out/bin/"; done
  cp "$build/worker/tessera-worker" "$build/server/tessera-coordinator" "$build/client/tessera" \
    "$out/bin/"
  strip --strip-debug "$out"/bin/*
  # Every library the binaries load, resolved here, but glibc and the GPU stack.
  local needed=()
  ldd "$out"/bin/* | awk '/=> \// { print $1 " " $3 }' | sort -u >"$out/ldd.txt"
  while read -r soname path; do
    if [[ "$soname" =~ $gpu_stack ]]; then
      needed+=("$soname")
    elif [[ ! "$soname" =~ $glibc ]]; then
      cp -L "$path" "$out/lib/$soname"
    fi
  done <"$out/ldd.txt"
  strip --strip-unneeded "$out"/lib/* 2>/dev/null || true
  printf '%s\n' "${needed[@]}" | sort -u >"$out/gpu-libraries.txt"
  {
    echo "built from: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown) ($(git -C "$repo" status --porcelain | wc -l) files changed)"
    echo "built on: $(uname -srm), $(date -u +%Y-%m-%dT%H:%MZ)"
    local nvcc
    nvcc="$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -n1)"
    echo "nvcc: $("${nvcc:-nvcc}" --version | tail -n1)"
    echo "NCCL: $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$(dirname "$(dirname "$nvcc")")/include/nccl.h" | paste -sd. -)"
    echo "needs from the GPU machine: $(tr '\n' ' ' <"$out/gpu-libraries.txt")"
  } >"$out/manifest.txt"
  cp "$0" "$out/run-gpu-checks.sh"
  tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
  echo "run-gpu-checks: bundled $(ls "$out/bin" | wc -l) binaries and $(ls "$out/lib" | wc -l) libraries into $out ($(du -sh "$out" | cut -f1); $out.tar.xz $(du -sh "$out.tar.xz" | cut -f1))"
  cat "$out/manifest.txt"
}

# Directories holding each library of gpu-libraries.txt on this machine, for LD_LIBRARY_PATH.
find_gpu_libraries() {
  local dir="$1" dirs=() missing=() soname d found
  local candidates=("${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64
    /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/*/lib /usr/lib/x86_64-linux-gnu /usr/lib64
    /usr/lib/wsl/lib)
  local py
  for py in /usr/lib/python3*/site-packages /usr/local/lib/python3*/*-packages \
    "$HOME"/.local/lib/python3*/site-packages; do
    candidates+=("$py"/nvidia/*/lib)
  done
  while read -r soname; do
    [ -n "$soname" ] || continue
    found=""
    for d in "${candidates[@]}"; do
      if [ -e "$d/$soname" ]; then found="$d" && break; fi
    done
    if [ -z "$found" ]; then
      missing+=("$soname")
    else
      case " ${dirs[*]} " in
        *" $found "*) ;;
        *) dirs+=("$found") ;;
      esac
    fi
  done <"$dir/gpu-libraries.txt"
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "run-gpu-checks: this machine lacks ${missing[*]} (the bundle was built against them;" \
      "install that CUDA / NCCL release or set CUDA_HOME)" >&2
    return 1
  fi
  (IFS=: && echo "${dirs[*]}")
}

# Runs one suite: name, minimum GPUs, then the command; appends its row to the summary.
summary=()
failed=0
ran=0
suite() {
  local name="$1" min_gpus="$2"
  shift 2
  local log
  log="$logs/$(tr -c 'A-Za-z0-9\n' '_' <<<"$name").log"
  if [ "$gpus" -lt "$min_gpus" ]; then
    summary+=("$(printf '%-40s %-8s %s' "$name" "not run" "needs $min_gpus GPUs, $gpus here")")
    return
  fi
  local start=$SECONDS status=0
  timeout 1800 "$@" >"$log" 2>&1 || status=$?
  local seconds=$((SECONDS - start))
  local passed skipped failures
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n1 || true)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n1 || true)
  failures=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | tail -n1 || true)
  local counts="passed ${passed:-0}, failed ${failures:-0}, skipped ${skipped:-0}"
  [ -n "$passed$skipped$failures" ] || counts="exit status $status"
  local result=PASS
  if [ "$status" -ne 0 ]; then
    result=FAIL
    failed=1
  elif [ "${passed:-1}" = 0 ] && [ -n "$skipped" ]; then
    result=SKIPPED  # every case skipped: report it, it proves nothing
  fi
  ran=1
  summary+=("$(printf '%-40s %-8s %-40s %5ds  %s' "$name" "$result" "$counts" "$seconds" "$log")")
}

# The gtest filter of program_runner_test's cases whose meshes fit on `gpus` GPUs.
program_filter() {
  local g="$1" parts=() r
  for r in 1 2 3 4; do [ "$r" -le "$g" ] && parts+=("Models/ModelProgramTest.*_${r}Ranks_*"); done
  [ "$g" -ge 2 ] && parts+=("TpSizes/DataParallelProgramTest.*/0" "Cases/BadCommandTest.*"
    "ProgramStepFailureTest.*" "Cases/OneRankFailsTest.*/ForwardInput*"
    "Cases/OneRankFailsTest.*/TrainingInput*" "Cases/OneRankFailsTest.*/GradientOfAnotherShape*"
    "Cases/OneRankFailsTest.*/AStepFailsOnOneRank")
  [ "$g" -ge 4 ] && parts+=("TpSizes/DataParallelProgramTest.*/1"
    "Cases/OneRankFailsTest.*/DataParallelMesh*")
  [ "$g" -ge 6 ] && parts+=("TpSizes/DataParallelProgramTest.*/2")
  (IFS=: && echo "${parts[*]}")
}

run() {
  local dir="${1:-build/gpu-checks}"
  if [[ "$dir" == *.tar.xz ]]; then
    local into
    into="$(mktemp -d)"
    tar -C "$into" -xJf "$dir"
    dir="$into/$(basename "$dir" .tar.xz)"
  fi
  dir="$(cd "$dir" && pwd)"
  [ -x "$dir/bin/tessera-worker" ] || {
    echo "run-gpu-checks: no bundle in $dir (make one with: $0 bundle)" >&2
    exit 2
  }
  local gpu_dirs
  gpu_dirs="$(find_gpu_libraries "$dir")" || exit 2
  export LD_LIBRARY_PATH="$dir/lib${gpu_dirs:+:$gpu_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$dir"/bin/* 2>/dev/null | grep -q 'not found'; then
    echo "run-gpu-checks: libraries the binaries need are missing:" >&2
    ldd "$dir"/bin/* 2>/dev/null | grep 'not found' | sort -u >&2
    exit 2
  fi
  logs="$dir/logs"
  mkdir -p "$logs"
  local devices
  if ! devices="$("$dir/bin/tessera-worker" --log_level=off --list_devices 2>&1)"; then
    echo "run-gpu-checks: no GPU to run on: $devices" >&2
    exit 2
  fi
  gpus=$(grep -c '^cuda:' <<<"$devices" || true)
  if [ "$gpus" -eq 0 ]; then
    echo "run-gpu-checks: no GPU to run on (tessera-worker --list_devices lists none)" >&2
    exit 2
  fi
  echo "run-gpu-checks: $(sed -n 1p "$dir/manifest.txt")"
  echo "run-gpu-checks: $gpus GPU(s) on $(hostname):"
  awk -F'\t' '{ printf "  %s  %s  %.1f GiB (%.1f GiB free)\n", $1, $2, $3 / 2^30, $4 / 2^30 }' \
    <<<"$devices"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1 |
    sed 's/^/  driver /'
  echo "  CUDA libraries from ${gpu_dirs:-the default library path}"

  local bin="$dir/bin"
  export TESSERA_COORDINATOR_BINARY="$bin/tessera-coordinator" TESSERA_WORKER_BINARY="$bin/tessera-worker"
  suite "kernel conformance (cuda:0)" 1 "$bin/cuda_kernels_test" --gtest_brief=1
  suite "CUDA kernels against the CPU's" 1 "$bin/cuda_vs_cpu_test" --gtest_brief=1
  suite "ATen ops on cuda:0" 1 env TESSERA_TEST_DEVICE=cuda "$bin/aten_ops_test" --gtest_brief=1
  suite "NCCL communicators (1-4 ranks)" 1 "$bin/communicator_test" --gtest_brief=1 \
    --gtest_filter='*nccl*:*Nccl*'
  local executor_filter='*'
  [ "$gpus" -lt 4 ] && executor_filter='-*mesh4*:*mesh2x2*'
  suite "command executor, ranks on GPUs" 2 env TESSERA_TEST_DEVICE=cuda \
    "$bin/command_executor_test" --gtest_brief=1 --gtest_filter="$executor_filter"
  suite "module programs, ranks on GPUs" 1 env TESSERA_TEST_DEVICE=cuda \
    "$bin/program_runner_test" --gtest_brief=1 --gtest_filter="$(program_filter "$gpus")"
  suite "DTensor suite on a cuda mesh" 4 env TESSERA_TEST_DEVICE=cuda \
    "$bin/cluster_dtensor_test" --gtest_brief=1
  suite "module suite on a cuda mesh" 4 env TESSERA_TEST_DEVICE=cuda \
    "$bin/cluster_module_test" --gtest_brief=1
  suite "tessera up --device cuda --selfcheck" 1 "$bin/tessera" up --device cuda --selfcheck
  if [ "${TESSERA_GPU_BENCH:-0}" = 1 ]; then
    suite "bench: collectives vs raw NCCL" 1 "$bin/collectives_bench" --device=cuda --rounds=2 \
      --json="$logs/collectives_cuda.json"
    suite "bench: DTensor transfers on cuda" 1 "$bin/dtensor_bench" --device=cuda --rounds=3 \
      --memory_bytes=268435456 --latency_iterations=300 --pipelined_ops=300 \
      --json="$logs/dtensor_cuda.json"
    suite "bench: TP modules on cuda vs one GPU" 1 "$bin/module_bench" --device=cuda \
      --sections=mlp,step,block --rounds=3 --json="$logs/module_cuda.json"
  fi

  echo
  printf '%-40s %-8s %-40s %6s  %s\n' "suite" "result" "cases" "time" "log"
  printf '%s\n' "${summary[@]}"
  if [ "$ran" -eq 0 ]; then exit 2; fi
  exit "$failed"
}

case "${1:-all}" in
  bundle) shift && bundle "$@" ;;
  run) shift && run "$@" ;;
  all)
    bundle build/gpu build/gpu-checks
    run build/gpu-checks
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
