"""Fixtures of the Python client's tests: one `tessera up --workers 4` cluster for the whole run
(or $TESSERA_TEST_COORDINATOR, an address of a running one), a session connected to it, and its
meshes. The package `tessera` comes from $PYTHONPATH (ctest sets the build tree's
build/client/python), else from build/client/python under the repository, else as installed.
Fixtures start nothing until a test asks for them, so the other tests here do not pay for them."""

import importlib.util
import os
import pathlib
import re
import signal
import subprocess
import tempfile
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD_PACKAGE = REPO / "build" / "client" / "python"
if importlib.util.find_spec("tessera") is None and (BUILD_PACKAGE / "tessera" / "v1").is_dir():
    sys.path.insert(0, str(BUILD_PACKAGE))

CLI = pathlib.Path(os.environ.get("TESSERA_CLI", REPO / "build" / "client" / "tessera"))
WORKERS = 4


def start_cluster(workers=WORKERS):
    """`tessera up --workers N`: the process and the coordinator's address."""
    if not CLI.exists():
        pytest.skip(f"{CLI} is not built (cmake --build build --target tessera)")
    # Checkpoint tests write under pytest's temporary directories.
    process = subprocess.Popen([str(CLI), "up", "--workers", str(workers),
                                "--checkpoint_root", tempfile.gettempdir()],
                               stdout=subprocess.PIPE, text=True)
    for line in process.stdout:
        found = re.search(r"coordinator at (\S+),", line)
        if found:
            return process, found.group(1)
    stop_cluster(process)
    raise RuntimeError(f"tessera up ended without a coordinator address (exit {process.returncode})")


def stop_cluster(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


@pytest.fixture(scope="session")
def tessera_address():
    """The coordinator's host:port."""
    if os.environ.get("TESSERA_TEST_COORDINATOR"):
        yield os.environ["TESSERA_TEST_COORDINATOR"]
        return
    process, address = start_cluster()
    try:
        yield address
    finally:
        stop_cluster(process)


@pytest.fixture(scope="session")
def session(tessera_address):
    """A session on the cluster, the default one while the tests run."""
    tessera = pytest.importorskip("tessera", reason="the tessera package is not importable "
                                  "(cmake --build build --target tessera_python)")
    s = tessera.connect(tessera_address)
    yield s
    s.close()


@pytest.fixture(scope="session")
def meshes(session):
    """The meshes the tests use: 'world' (4 ranks, of tessera up), a line of 3 ranks and a 2x2
    mesh (dp, tp)."""
    import tessera

    out = {
        "world": tessera.get_device_mesh("world"),
        "line3": tessera.init_device_mesh("cpu", (3,), mesh_dim_names=("x",), worker_ids=[0, 1, 2]),
        "grid": tessera.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")),
    }
    return out
