#!/usr/bin/env bash
# The unit and cluster tests under sanitizers: everything (the daemons the cluster tests start
# included) rebuilt with ASan + UBSan in build/asan, or with TSan in build/tsan.
#
#   scripts/run-sanitizers.sh [address|thread|all] [CTEST_REGEX]
#       Builds the variant (default: address) and runs ctest on it, every test or those matching
#       CTEST_REGEX. A report fails the test that made it: UBSan halts on the first finding, ASan
#       on the first error and on leaks at exit. Suppressions, each with its reason, live in
#       scripts/sanitizers/. The fuzz targets have their own sanitized build (run-fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
variant="${1:-address}"
filter="${2:-}"
case "$variant" in
  address | thread) variants=("$variant") ;;
  all) variants=(address thread) ;;
  *) echo "run-sanitizers: the variant is '$variant'; it takes address, thread or all" >&2; exit 2 ;;
esac
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
supp="$PWD/scripts/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
# Sanitized binaries run several times slower; the collective and RPC timeouts stay as they are.
for v in "${variants[@]}"; do
  build="build/${v/address/asan}"
  build="${build/thread/tsan}"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    -DTESSERA_SANITIZE="$v" -DTESSERA_CUDA=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)"
  args=(--test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 1800 -LE fuzz)
  if [ -n "$filter" ]; then args+=(-R "$filter"); fi
  echo "run-sanitizers: $v: ctest ${filter:+-R $filter}"
  ctest "${args[@]}"
done
