#!/usr/bin/env bash
# The Python client's one-command install from a fresh checkout: the repository's files (tracked and
# not ignored, as a clone of the next commit holds them, so no stubs generated before) are copied
# to WORKDIR, `pip install` of client/python runs in a plain venv over Debian's Python packages
# (--system-site-packages, offline: --no-index --no-build-isolation, as client/python/README.md
# shows; the stubs made by Debian's protoc and grpc_python_plugin), and from outside the copy
# `import tessera` and every generated stub module must come from the venv's site-packages.
# usage: python_install_test.sh REPO_ROOT WORKDIR [PYTHON]
#   PYTHON: Debian's python3 (default /usr/bin/python3), whose python3-venv, python3-wheel,
#   python3-grpcio, python3-protobuf and python3-numpy the venv uses.
set -euo pipefail
repo="$1"
work="$2"
python="${3:-/usr/bin/python3}"
rm -rf "${work}" && mkdir -p "${work}"
copy="${work}/repo"
venv="${work}/venv"

needs() {  # needs DEBIAN_PACKAGE COMMAND...: exits 1 naming the package when COMMAND fails.
  local package="$1"
  shift
  "$@" > /dev/null 2>&1 || { echo "python_install_test: needs Debian's ${package}"; exit 1; }
}
needs python3-venv "${python}" -c "import ensurepip, venv"
needs python3-wheel "${python}" -c "import wheel"
needs python3-grpcio "${python}" -c "import grpc"
needs python3-protobuf "${python}" -c "import google.protobuf"
needs python3-numpy "${python}" -c "import numpy"
needs protobuf-compiler command -v protoc
needs protobuf-compiler-grpc command -v grpc_python_plugin

# The files a clone would hold: tracked (less those deleted in the working tree) and new ones not
# ignored, with their working-tree contents.
mkdir -p "${copy}"
git -C "${repo}" ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do
      if [ -e "${repo}/${f}" ] || [ -L "${repo}/${f}" ]; then printf '%s\0' "${f}"; fi
    done \
  | tar -C "${repo}" --null --no-recursion -T - -cf - | tar -C "${copy}" -xf -
if [ -e "${copy}/client/python/tessera/v1" ] || [ -e "${copy}/client/python/tessera/inference" ]; then
  echo "the copy holds generated stubs: they must not be in the repository"
  exit 1
fi

"${python}" -m venv --system-site-packages "${venv}"
unset PYTHONPATH TESSERA_PROTO_DIR
# client/python/README.md's offline install; its dependencies must be met by Debian's packages.
cd "${copy}"
if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "${venv}/bin/pip" install --no-index --no-build-isolation \
    --no-cache-dir ./client/python > "${work}/pip.log" 2>&1; then
  echo "pip install ./client/python in ${copy} failed:"
  tail -n 30 "${work}/pip.log"
  exit 1
fi

# From outside the copy, in isolated mode (no PYTHONPATH, no current directory on sys.path).
mkdir -p "${work}/elsewhere"
cd "${work}/elsewhere"
"${venv}/bin/python" -I - "${copy}/proto" <<'EOF'
import importlib, pathlib, sys, sysconfig

site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
proto = pathlib.Path(sys.argv[1])
import tessera
from tessera import connect, distribute_tensor, init_device_mesh  # noqa: F401

# Each proto's messages (x_pb2) and services (x_pb2_grpc, written for every proto).
stems = [f"tessera.v1.{p.stem}" for p in sorted((proto / "tessera" / "v1").glob("*.proto"))]
stems += ["tessera.inference.grpc_predict_v2"]
names = [stem + suffix for stem in stems for suffix in ("_pb2", "_pb2_grpc")]
wrong = []
for name in ["tessera"] + names:
    module = importlib.import_module(name)
    if site not in pathlib.Path(module.__file__).resolve().parents:
        wrong.append(f"{name} from {module.__file__}")
if wrong:
    sys.exit(f"not from the venv's {site}: " + "; ".join(wrong))
print(f"python_install: tessera and {len(names)} stub modules from {site}")
EOF
