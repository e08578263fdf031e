"""setup.py of the tessera Python client: only the build hooks; the metadata is in pyproject.toml.

The packages tessera.v1 and tessera.inference are the gRPC stubs, generated from Tessera's proto/
into the source package by generate_protos.py, not kept in the repository. They are generated
before any command looks for the packages' folders: egg_info (pip's first step, the metadata, whose
file list walks every package) and build_py. So an install needs protoc with grpc_python_plugin
(Debian: protobuf-compiler-grpc) or grpcio-tools (a build requirement, so pip's isolated build has
it), and the repository's proto/ folder ($TESSERA_PROTO_DIR, by default ../../proto).
"""

import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate_protos  # noqa: E402

_stubs_generated = False


def generate_stubs() -> None:
    """Generates the stubs into the source package, once per process."""
    global _stubs_generated
    if not _stubs_generated:
        generate_protos.generate(HERE)
        _stubs_generated = True


class EggInfoWithStubs(egg_info):
    """egg_info that first generates the stubs, whose folders its file list walks."""

    def run(self) -> None:
        generate_stubs()
        super().run()


class BuildPyWithStubs(build_py):
    """build_py that first generates the stubs, which it copies with the package."""

    def run(self) -> None:
        generate_stubs()
        super().run()


setup(cmdclass={"egg_info": EggInfoWithStubs, "build_py": BuildPyWithStubs})
