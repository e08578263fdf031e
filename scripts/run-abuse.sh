#!/usr/bin/env bash
# The abuse run (bench/abuse.cc) against a local 4-worker cluster, built in build/test as CI
# configures it: wrong credentials from the cluster's own host beside good traffic, floods of idle
# streams at the coordinator and a worker, bursts of concurrent large KServe requests with the
# coordinator's resident memory sampled, checkpoint paths outside the workers' root, and a worker
# restarted under a published model. The report goes to stdout and build/test/bench/abuse.log, the
# figures to build/test/bench/abuse.json; exit status 1 on any lost tensor, refused legitimate
# call, or memory not given back. Not part of CI's budget (about 2 minutes here); the regression
# tests of each fix run in CI.
#
#   scripts/run-abuse.sh [ABUSE FLAGS...]
#       e.g. --phases=memory --requests=64 --request_mib=16, or --idle_streams=4000.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/test
if [ ! -f "$build/build.ninja" ]; then
  ./scripts/install-deps.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON
fi
cmake --build "$build" -j"$(nproc)" --target abuse tessera-coordinator tessera-worker
mkdir -p "$build/bench"
"$build/bench/abuse" --json="$build/bench/abuse.json" "$@" 2>&1 | tee "$build/bench/abuse.log"
exit "${PIPESTATUS[0]}"
