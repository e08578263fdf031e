#!/usr/bin/env bash
# The installed package end to end: installs the build tree to a temporary prefix, checks that the
# public headers carry no gRPC or generated types, builds tests/client/install_consumer against the prefix
# alone (find_package(Tessera), tessera::client), and runs it offline and against the installed
# `tessera up`.
# usage: install_consumer_test.sh BUILD_DIR CONSUMER_SOURCE WORKDIR GENERATOR CXX [LAUNCHER [FLAGS]]
#   FLAGS: compile and link flags the consumer needs too (a sanitized build's -fsanitize=...).
set -euo pipefail
build="$1"
source="$2"
work="$3"
generator="$4"
cxx="$5"
launcher="${6:-}"
flags="${7:-}"
rm -rf "${work}" && mkdir -p "${work}"
prefix="${work}/prefix"

cmake --install "${build}" --prefix "${prefix}" > "${work}/install.log"
test -f "${prefix}/include/tessera/tessera.h"
test -x "${prefix}/bin/tessera" && test -x "${prefix}/bin/tessera-coordinator" \
  && test -x "${prefix}/bin/tessera-worker"
if grep -rnE '#include [<"](grpc|google/protobuf|tessera/v1/|core/)|\.pb\.h' "${prefix}/include"; then
  echo "installed headers name gRPC, generated code or the source tree's core/"
  exit 1
fi

cmake -S "${source}" -B "${work}/build" -G "${generator}" -DCMAKE_CXX_COMPILER="${cxx}" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="${launcher}" -DCMAKE_PREFIX_PATH="${prefix}" \
  -DCMAKE_CXX_FLAGS="${flags}" -DCMAKE_EXE_LINKER_FLAGS="${flags}" \
  -DCMAKE_BUILD_TYPE=Release > "${work}/configure.log"
cmake --build "${work}/build" > "${work}/build.log"
consumer="${work}/build/tessera_consumer"
"${consumer}"

"${prefix}/bin/tessera" up --workers 2 > "${work}/up.log" 2>&1 &
up=$!
trap 'kill ${up} 2>/dev/null; wait ${up} 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "coordinator at" "${work}/up.log" && break
  sleep 0.1
done
address="$(grep -m1 -o 'coordinator at [0-9.:]*' "${work}/up.log" | cut -d' ' -f3)"
[[ -n "${address}" ]] || { cat "${work}/up.log"; exit 1; }
"${consumer}" "${address}"
