#!/usr/bin/env bash
# The unit and cluster tests under a sanitizer: everything (the daemons the cluster tests start
# included) rebuilt with it in build/asan or build/tsan.
#
#   scripts/run-sanitizers.sh [address|thread] [CTEST_REGEX]
#       Builds the variant (default: address) and runs ctest on it, every test or those matching
#       CTEST_REGEX. address is ASan + UBSan: UBSan halts on the first finding, ASan on the first
#       error and on leaks at exit. thread is TSan. Every process writes its reports to a file
#       under the build's sanitizer-reports/, and any report there fails the run, whatever ctest
#       says. Suppressions, each with its reason, live in scripts/sanitizers/. The fuzz targets
#       have their own sanitized build (run-fuzz.sh).
#   scripts/run-sanitizers.sh core [CTEST_REGEX]
#       The core tests only (ctest label core: the sharding model, the planners, the file formats,
#       which link tessera_core and tessera_reference alone) under ASan + UBSan, built in the fuzz
#       targets' clang build (build/fuzz), which compiles nothing else of the service for them:
#       a few minutes, so the test command runs it.
#
# TSan needs absl built with it. TSan sees a lock only where the code taking it is instrumented,
# and every lock in the project, and gRPC's, is an absl::Mutex whose code is in Debian's absl
# shared libraries, built without -fsanitize=thread: against those, every access guarded by a lock
# reads as a data race. So the thread variant first builds absl from Debian's own source of the
# installed libabsl-dev version (fetched with apt-get source through a private apt configuration
# made from the machine's sources; the system's apt state is not touched) with -fsanitize=thread,
# once, keeps the library of its locks (libabsl_synchronization) in build/tsan-absl/lib, and
# links the programs with an RPATH to it, which gRPC's and Gloo's absl dependencies follow too.
# libstdc++, gRPC, protobuf, Gloo, OpenBLAS, oneDNN and the rest of absl stay uninstrumented: their
# own accesses are not checked, std::mutex and std::thread are seen through TSan's pthread
# interceptors, and build/tsan/tests/tsan_canary checks, before the suite, that an unlocked counter
# is reported and absl's locks are seen.
set -euo pipefail
cd "$(dirname "$0")/.."
variant="${1:-address}"
filter="${2:-}"
case "$variant" in
  address) build=build/asan ;;
  thread) build=build/tsan ;;
  core) build=build/fuzz ;;
  *) echo "run-sanitizers: the variant is '$variant'; it takes address, thread or core" >&2; exit 2 ;;
esac
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

# build_tsan_absl DIR: absl of the installed libabsl-dev's version, from its Debian source, built
# shared with -fsanitize=thread and installed in DIR (DIR/lib), unless DIR/version says it is there.
build_tsan_absl() {
  local dir="$1" version work
  version=$(dpkg-query -W -f='${Version}' libabsl-dev)
  if [ -f "$dir/version" ] && [ "$(cat "$dir/version")" = "$version" ]; then return; fi
  echo "run-sanitizers: thread: building absl $version from Debian's source with TSan in $dir"
  work="$PWD/build/tsan-absl-work"
  rm -rf "$work" "$dir" && mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" \
    "$work/apt/parts"
  # The machine's own apt sources (one-line and deb822), as source entries.
  if [ -f /etc/apt/sources.list ]; then
    sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list >"$work/apt/sources.list"
  else
    : >"$work/apt/sources.list"
  fi
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    case "$f" in
      *.list) sed -n 's/^deb \(.*\)/deb-src \1/p' "$f" >"$work/apt/parts/$(basename "$f")" ;;
      *.sources) sed 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/parts/$(basename "$f")" ;;
    esac
  done
  local apt=(apt-get -q -o "Dir::Etc::SourceList=$work/apt/sources.list"
    -o "Dir::Etc::SourceParts=$work/apt/parts" -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::Cache=$work/apt/cache")
  # apt drops to its _apt user to download, who cannot write into this tree.
  if [ "$(id -u)" = 0 ]; then apt+=(-o "APT::Sandbox::User=root"); fi
  "${apt[@]}" update >/dev/null
  (cd "$work" && "${apt[@]}" source --download-only "abseil=$version" >/dev/null)
  # apt checked the files against the archive's signed index; the .dsc's own signature would need
  # the uploader's key (debian-keyring), which is not installed.
  dpkg-source --no-check -x "$work"/abseil_*.dsc "$work/src" >/dev/null
  # Debian's own configuration (debian/rules, its patches applied by dpkg-source): C++17, shared.
  cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${launcher[@]}" -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DABSL_PROPAGATE_CXX_STD=ON \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
  cmake --build "$work/build" -j"$(nproc)" >/dev/null
  cmake --install "$work/build" --prefix "$work/prefix" >/dev/null
  # Only absl's synchronization library (Mutex, CondVar, Notification) takes the instrumented
  # build. The rest stays the system's: gRPC's core, not instrumented, makes and hands over its own
  # absl::Status objects between its threads through atomics TSan cannot see, so instrumented
  # Status code reports each hand-over as a race with no frame of the project in it; and
  # base_internal::SpinLock splits its annotations between inline code and libabsl_base, so an
  # instrumented libabsl_base under uninstrumented callers (absl's time and random libraries)
  # fails TSan's own checks.
  mkdir -p "$dir/lib"
  cp -a "$work/prefix/lib/libabsl_synchronization.so"* "$dir/lib/"
  # The headers the project compiles against stay the system's; they must be the same.
  cmp -s "$work/src/absl/base/options.h" /usr/include/absl/base/options.h || {
    echo "run-sanitizers: thread: absl $version's options.h differs from the installed one" >&2
    exit 1
  }
  echo "$version" >"$dir/version"
  rm -rf "$work"
}

supp="$PWD/scripts/sanitizers"
# Every sanitized process writes its reports to a file of its own under $reports (the daemons the
# cluster tests start too, whose stderr goes to logs a passing test deletes, and whose leaks are
# found only as they exit): any report there fails the run, whatever ctest says.
reports="$PWD/$build/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
config=(-DTESSERA_SANITIZE="$variant")
if [ "$variant" != thread ]; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1:log_path=$reports/asan"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp:log_path=$reports/ubsan"
else
  build_tsan_absl "$PWD/build/tsan-absl"
  config+=(-DTESSERA_TSAN_ABSL_LIBDIR="$PWD/build/tsan-absl/lib")
  # A race is reported and the process goes on, so one run finds them all.
  # ignore_noninstrumented_modules: the libc calls of uninstrumented libraries (gRPC's sendmsg
  # and memcpy of a message it was handed, its frees) are not taken for accesses; their callers'
  # hand-offs go through atomics TSan does not see. The project's own accesses are all checked.
  tsan_options="halt_on_error=0:ignore_noninstrumented_modules=1:second_deadlock_stack=1:history_size=4:suppressions=$supp/tsan.supp:print_suppressions=0"
  export TSAN_OPTIONS="$tsan_options:log_path=$reports/tsan"
fi
if [ "$variant" = core ]; then
  # run-fuzz.sh's configuration of build/fuzz: clang, every file instrumented for libFuzzer with
  # ASan and UBSan.
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${launcher[@]}" -DTESSERA_FUZZ=ON -DTESSERA_CUDA=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target tessera_core_tests
else
  # Sanitized binaries run several times slower; the collective and RPC timeouts stay as they are.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    "${config[@]}" -DTESSERA_CUDA=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)"
fi
if [ "$variant" = thread ]; then
  # The build checks what it claims to: an unlocked counter is reported, and one under an
  # absl::Mutex (and a value handed over through Await) is not.
  canary="$PWD/$build/canary-reports"
  rm -rf "$canary" && mkdir -p "$canary"
  TSAN_OPTIONS="$tsan_options:log_path=$canary/race" "$build/tests/tsan_canary" race >/dev/null ||
    true
  locked=0
  TSAN_OPTIONS="$tsan_options:log_path=$canary/locked" "$build/tests/tsan_canary" locked \
    >/dev/null || locked=$?
  race_reports=("$canary"/race.*)
  locked_reports=("$canary"/locked.*)
  if [ ! -e "${race_reports[0]}" ] || [ -e "${locked_reports[0]}" ] || [ "$locked" != 0 ]; then
    echo "run-sanitizers: thread: the canary shows TSan does not see absl's locks or misses a" \
      "race (reports in $canary; tsan_canary locked exited $locked)" >&2
    exit 1
  fi
  echo "run-sanitizers: thread: canary: an unlocked race reported, absl::Mutex and Await seen"
fi
args=(--test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 1800 -LE fuzz)
if [ "$variant" = core ]; then args+=(-L core); fi
if [ -n "$filter" ]; then args+=(-R "$filter"); fi
echo "run-sanitizers: $variant: ctest ${filter:+-R $filter}"
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
