"""Every example under examples/ runs against `tessera up --workers 4` and checks itself
(each ends by printing "ok"); the torch one skips without torch, the tritonclient variant of the
inference example without tritonclient."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
PACKAGE = pathlib.Path(tessera.__file__).resolve().parents[1]

CASES = [
    ("distribute_and_multiply.py", ["--size", "256"], None),
    ("parallelize_mlp.py", [], None),
    ("remote_inference.py", ["--client", "tessera"], None),
    ("remote_inference.py", ["--client", "tritonclient"], "tritonclient"),
    ("export_torch_module.py", [], "torch"),
]


@pytest.mark.parametrize("script,args,needs", CASES,
                         ids=[f"{c[0][:-3]}{'-' + c[2] if c[2] else ''}" for c in CASES])
def test_example(tessera_address, script, args, needs):
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{needs} is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(PACKAGE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, str(EXAMPLES / script), tessera_address, *args],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "ok", result.stdout
