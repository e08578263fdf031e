"""Generates the gRPC stubs of Tessera's protos into the Python package `tessera`.

The coordinator's services (proto/tessera/v1/*.proto) become `tessera.v1.*_pb2` and
`tessera.v1.*_pb2_grpc`, the KServe v2 protocol (proto/inference/grpc_predict_v2.proto)
`tessera.inference.grpc_predict_v2_pb2[_grpc]`. It runs Debian's `protoc` with
`grpc_python_plugin` (package protobuf-compiler-grpc) when both are on PATH (or named by
$TESSERA_PROTOC and $TESSERA_GRPC_PYTHON_PLUGIN), else grpcio-tools' `grpc_tools.protoc`.
Used by setup.py (pip install) and by CMake (the build tree's copy of the package, which the
tests import).

    python3 generate_protos.py --proto-dir ../../proto --out .
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
from typing import List, Optional

HERE = pathlib.Path(__file__).resolve().parent


def find_proto_dir() -> pathlib.Path:
    """The repository's proto/ folder: $TESSERA_PROTO_DIR, else ../../proto from this file."""
    candidates = [os.environ.get("TESSERA_PROTO_DIR"), HERE.parent.parent / "proto", HERE / "proto"]
    for c in candidates:
        if c and (pathlib.Path(c) / "tessera" / "v1" / "types.proto").is_file():
            return pathlib.Path(c).resolve()
    raise FileNotFoundError(
        "cannot find Tessera's proto/ folder (tessera/v1/types.proto); set TESSERA_PROTO_DIR"
    )


def _protoc_command() -> List[str]:
    """protoc with the gRPC Python plugin: Debian's binaries, else grpcio-tools."""
    protoc = os.environ.get("TESSERA_PROTOC") or shutil.which("protoc")
    plugin = os.environ.get("TESSERA_GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin")
    if protoc and plugin:
        return [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]
    try:
        import grpc_tools  # noqa: F401  (grpcio-tools, where pip installed it)
    except ImportError:
        raise RuntimeError(
            "generating Tessera's gRPC stubs needs protoc and grpc_python_plugin "
            "(apt-get install protobuf-compiler protobuf-compiler-grpc) or grpcio-tools "
            "(pip install grpcio-tools)"
        ) from None
    return [sys.executable, "-m", "grpc_tools.protoc"]


def _run(command: List[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")


def generate(out: pathlib.Path, proto_dir: Optional[pathlib.Path] = None) -> List[pathlib.Path]:
    """Writes the stubs under `out` (the folder holding the package `tessera`); returns them."""
    proto_dir = proto_dir or find_proto_dir()
    out = out.resolve()
    package = out / "tessera"
    base = _protoc_command()
    v1 = sorted(str(p.relative_to(proto_dir)) for p in (proto_dir / "tessera" / "v1").glob("*.proto"))
    # tessera/v1/x.proto -> <out>/tessera/v1/x_pb2.py: its imports ("from tessera.v1 import ...")
    # resolve inside the package.
    _run(base + [f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}"] + v1)
    # inference/grpc_predict_v2.proto -> <out>/tessera/inference/, its one import moved there.
    _run(base + [f"-I{proto_dir}", f"--python_out={package}", f"--grpc_python_out={package}",
                 "inference/grpc_predict_v2.proto"])
    grpc_file = package / "inference" / "grpc_predict_v2_pb2_grpc.py"
    text = grpc_file.read_text()
    grpc_file.write_text(text.replace("from inference import", "from tessera.inference import"))
    # Its messages go to a descriptor pool of their own: tritonclient registers the same
    # protocol's messages (inference.*) in the default pool, and both may live in one process.
    messages = package / "inference" / "grpc_predict_v2_pb2.py"
    text = messages.read_text()
    default_pool = "_descriptor_pool.Default().AddSerializedFile("
    if default_pool not in text:
        raise RuntimeError(f"{messages}: no {default_pool!r} to give a pool of its own")
    messages.write_text(text.replace(default_pool, "_descriptor_pool.DescriptorPool().AddSerializedFile("))
    written = []
    for sub in ("v1", "inference"):
        init = package / sub / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated from Tessera\'s proto/ by generate_protos.py."""\n')
        written += sorted((package / sub).glob("*.py"))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto-dir", type=pathlib.Path, default=None, help="Tessera's proto/ folder")
    parser.add_argument("--out", type=pathlib.Path, default=HERE, help="folder holding the package tessera")
    parser.add_argument("--copy-sources", action="store_true",
                        help="first copy the package's own .py files from this folder to --out")
    args = parser.parse_args()
    if args.copy_sources and args.out.resolve() != HERE:
        target = args.out / "tessera"
        target.mkdir(parents=True, exist_ok=True)
        for source in (HERE / "tessera").glob("*.py"):
            shutil.copy2(source, target / source.name)
        (target / "py.typed").write_text("")
    files = generate(args.out, args.proto_dir)
    print(f"generate_protos: {len(files)} files under {args.out / 'tessera'}")


if __name__ == "__main__":
    main()
