#!/usr/bin/env bash
# The unit and cluster tests under ASan + UBSan: everything (the daemons the cluster tests start
# included) rebuilt with -fsanitize=address,undefined in build/asan.
#
#   scripts/run-sanitizers.sh [address|thread] [CTEST_REGEX]
#       Builds the variant (default: address) and runs ctest on it, every test or those matching
#       CTEST_REGEX. A report fails the test that made it: UBSan halts on the first finding, ASan
#       on the first error and on leaks at exit. Suppressions, each with its reason, live in
#       scripts/sanitizers/. The fuzz targets have their own sanitized build (run-fuzz.sh).
#
# TSan (thread) is refused: every lock in the project is an absl::Mutex, and Debian's absl is not
# built with -fsanitize=thread, so TSan sees none of its lock/unlock edges and reports every access
# guarded by one as a data race, in the project's own frames (two threads incrementing a counter
# under an absl::MutexLock are reported; a suppression of absl's internals cannot hide that, and a
# suppression of the project's frames would hide the real races too). gRPC's own threads hand work
# over through the same uninstrumented absl. core/ and kernels/ start no threads, so TSan has nothing
# to check there. TESSERA_SANITIZE=thread still builds, for an absl built with TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
variant="${1:-address}"
filter="${2:-}"
case "$variant" in
  address) ;;
  thread)
    echo "run-sanitizers: thread: Debian's absl is not TSan-instrumented, so every absl::Mutex" \
      "reads as a data race; see this script's header" >&2
    exit 2
    ;;
  *) echo "run-sanitizers: the variant is '$variant'; it takes address" >&2; exit 2 ;;
esac
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
supp="$PWD/scripts/sanitizers"
build=build/asan
# Every sanitized process writes its reports to a file of its own under $reports (the daemons the
# cluster tests start too, whose stderr goes to logs a passing test deletes, and whose leaks are
# found only as they exit): any report there fails the run, whatever ctest says.
reports="$PWD/$build/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1:log_path=$reports/asan"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp:log_path=$reports/ubsan"
# Sanitized binaries run several times slower; the collective and RPC timeouts stay as they are.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DTESSERA_SANITIZE=address -DTESSERA_CUDA=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
args=(--test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 1800 -LE fuzz)
if [ -n "$filter" ]; then args+=(-R "$filter"); fi
echo "run-sanitizers: address: ctest ${filter:+-R $filter}"
status=0
ctest "${args[@]}" || status=$?
found=("$reports"/*)
if [ -e "${found[0]}" ]; then
  echo "run-sanitizers: ${#found[@]} report file(s) in $reports:" >&2
  for f in "${found[@]}"; do
    echo "== $f" >&2
    head -40 "$f" >&2
  done
  exit 1
fi
echo "run-sanitizers: no sanitizer report from any process"
exit "$status"
