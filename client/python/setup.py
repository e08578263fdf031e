"""setup.py of the tessera Python client: only the build hook; the metadata is in pyproject.toml.

Before the package's files are copied, the gRPC stubs are generated from Tessera's proto/ into
tessera/v1 and tessera/inference (generate_protos.py), so an install needs protoc with
grpc_python_plugin (Debian: protobuf-compiler-grpc) or grpcio-tools, and the repository's proto/
folder ($TESSERA_PROTO_DIR, by default ../../proto).
"""

import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate_protos  # noqa: E402


class BuildPyWithStubs(build_py):
    """build_py that first generates the gRPC stubs into the source package."""

    def run(self) -> None:
        generate_protos.generate(HERE)
        super().run()


setup(cmdclass={"build_py": BuildPyWithStubs})
