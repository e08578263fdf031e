"""The op registry's schemas (`tessera ops list --schemas`) against torch's own, where torch is
installed: the same arguments, types, defaults and returns, as torch's schema printer writes them
(its quotes and float spellings aside)."""

import os
import re
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the schemas are not compared")


def normalized(schema: str) -> str:
    """A schema with torch's printer's spellings made one: "x" and 'x', 0. and 0.0, 1.0000000000000001e-05
    and 1e-05, MemoryFormat, Reduction and ScalarType defaults by name or number (torch 2.15 prints
    reduction=1 for Mean and dtype=4 for long)."""
    s = schema.strip().replace('"', "'")
    s = re.sub(r"=(-?\d+(\.\d*)?(e-?\d+)?)", lambda m: "=" + repr(float(m.group(1)))
               if "." in m.group(1) or "e" in m.group(1) else m.group(0), s)
    s = s.replace("reduction=Mean", "reduction=1").replace("dtype=long", "dtype=4")
    return s.replace("memory_format=contiguous_format", "memory_format=0")


def registry_schemas():
    cli = os.environ.get("TESSERA_CLI", "tessera")
    out = subprocess.run([cli, "ops", "list", "--schemas"], check=True, capture_output=True,
                         text=True).stdout
    return [line.split("schema:", 1)[1].strip() for line in out.splitlines() if "schema:" in line]


def test_every_registered_schema_is_torchs():
    schemas = registry_schemas()
    assert len(schemas) > 100
    different = []
    for ours in schemas:
        name = ours.split("(")[0]
        base, _, overload = name.partition(".")
        theirs = [s for s in torch._C._jit_get_schemas_for_operator("aten::" + base)
                  if s.overload_name == overload]
        if not theirs:
            different.append(f"{name}: torch has no such overload")
            continue
        torch_text = str(theirs[0]).replace("aten::", "", 1)
        if normalized(torch_text) != normalized(ours):
            different.append(f"{name}:\n  ours  {ours}\n  torch {torch_text}")
    assert not different, "\n".join(different)
