"""torch.nn's names on DTensors: ``tessera.nn.functional`` (nn_functional.py), importable as
``import tessera.nn.functional as F``."""

from __future__ import annotations

import sys

from . import nn_functional as functional

__all__ = ["functional"]

# `import tessera.nn.functional` finds the module under its torch name.
sys.modules[f"{__name__}.functional"] = functional
