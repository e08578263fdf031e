#!/usr/bin/env bash
# Installs every build and test dependency of Tessera from Debian 12 packages. Idempotent.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates openssl libssl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgloo-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libcli11-dev libspdlog-dev libfmt-dev
  nlohmann-json3-dev libcivetweb-dev
  libsqlite3-dev libgtest-dev libgmock-dev libbenchmark-dev prometheus
  clang-format python3 python3-numpy python3-grpcio python3-protobuf python3-pytest python3-yaml
  python3-venv python3-wheel
  libzip-dev
  clang libclang-rt-14-dev
)
# kubectl for `kubectl kustomize` (the deploy/k8s render tests): Debian's kubernetes-client, unless
# a kubectl is already installed (another package of it would conflict).
command -v kubectl > /dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#packages[@]} packages present"
