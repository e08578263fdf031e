"""``tessera.export(torch_module, example_inputs, "m.pt2")``: the module as torch.export exports
it (any model: its graph of ATen ops), which ``load_module("m.pt2", mesh=...)`` loads
(docs/import.md). ``tessera.export(torch_module, directory)``: a PyTorch module as a Tessera
module spec (JSON, docs/modules.md) and its state_dict as safetensors, which ``load_module``
takes, so that a model moves to the service in one call.

Modules map by type: Linear, Embedding, LayerNorm, RMSNorm, ReLU, SiLU, GELU, Dropout, Sequential,
ModuleList; any other module with children becomes a "Module" whose forward runs its children in
registration order (what the spec's Module means: check that your forward does that). Modules the
spec cannot describe raise Unimplemented naming them."""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from . import dtypes as _dt
from . import safetensors as _st
from .errors import InvalidArgument, Unimplemented

__all__ = ["Exported", "export", "export_program", "module_spec"]


@dataclass
class Exported:
    """What export wrote: the spec (a dict) and the two files."""

    spec: Dict[str, Any]
    spec_path: pathlib.Path
    weights_path: pathlib.Path


def _leaf(m: Any, path: str) -> Dict[str, Any]:
    import torch.nn as nn

    if isinstance(m, nn.Linear):
        return {"type": "Linear", "in_features": m.in_features, "out_features": m.out_features,
                "bias": m.bias is not None}
    if isinstance(m, nn.Embedding):
        if m.padding_idx is not None or m.max_norm is not None or m.sparse:
            raise Unimplemented(f"{path or 'the root'}: Embedding with padding_idx, max_norm or "
                                "sparse is not in the module spec")
        return {"type": "Embedding", "num_embeddings": m.num_embeddings,
                "embedding_dim": m.embedding_dim}
    if isinstance(m, nn.LayerNorm):
        if m.elementwise_affine and getattr(m, "bias", True) is None:
            raise Unimplemented(f"{path or 'the root'}: LayerNorm(bias=False) is not in the spec")
        return {"type": "LayerNorm", "normalized_shape": list(m.normalized_shape), "eps": m.eps,
                "elementwise_affine": m.elementwise_affine}
    if hasattr(nn, "RMSNorm") and isinstance(m, nn.RMSNorm):
        return {"type": "RMSNorm", "normalized_shape": list(m.normalized_shape), "eps": m.eps,
                "elementwise_affine": m.elementwise_affine}
    if isinstance(m, nn.ReLU):
        return {"type": "ReLU"}
    if isinstance(m, nn.SiLU):
        return {"type": "SiLU"}
    if isinstance(m, nn.GELU):
        return {"type": "GELU", "approximate": m.approximate}
    if isinstance(m, nn.Dropout):
        return {"type": "Dropout", "p": m.p}
    raise Unimplemented(f"{path or 'the root'}: {type(m).__name__} has no Tessera module type "
                        "(Linear, Embedding, LayerNorm, RMSNorm, ReLU, SiLU, GELU, Dropout, "
                        "Sequential, ModuleList, or a Module of those)")


def _node(m: Any, path: str) -> Dict[str, Any]:
    import torch.nn as nn

    children = list(m.named_children())
    if isinstance(m, (nn.Sequential, nn.ModuleList)):
        kind = "Sequential" if isinstance(m, nn.Sequential) else "ModuleList"
        return {"type": kind, "children": [_node(c, f"{path}.{n}" if path else n)
                                           for n, c in children]}
    if not children:
        return _leaf(m, path)
    if type(m).__module__.startswith("torch.nn"):
        return _leaf(m, path)  # a torch module with submodules the spec does not describe
    direct = [n for n, _ in m.named_parameters(recurse=False)]
    if direct:
        raise Unimplemented(f"{path or 'the root'}: {type(m).__name__} holds parameters of its "
                            f"own ({', '.join(direct)}); only its children's are exported")
    out = []
    for n, c in children:
        node = _node(c, f"{path}.{n}" if path else n)
        node = {"name": n, **node}
        out.append(node)
    return {"type": "Module", "children": out}


def _first_input(spec: Dict[str, Any]) -> Optional[List[int]]:
    """The input shape the first module in forward order fixes (as the service infers it)."""
    t = spec["type"]
    if t == "Linear":
        return [-1, spec["in_features"]]
    if t in ("LayerNorm", "RMSNorm"):
        return [-1, *spec["normalized_shape"]]
    if t == "Embedding":
        return [-1, -1]
    for c in spec.get("children", []):
        shape = _first_input(c)
        if shape is not None:
            return shape
    return None


def module_spec(torch_module: Any, *, input_dtype: Any = None,
                input_shape: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The spec of a torch module (see the module's docstring). The input's dtype and shape are
    written when given, or when the parameters are not float32 (the service gives parameters
    the input's floating dtype)."""
    spec = _node(torch_module, "")
    dtypes = {p.dtype for p in torch_module.parameters()}
    if len(dtypes) > 1:
        raise InvalidArgument(f"parameters of several dtypes {sorted(map(str, dtypes))}: cast the "
                              "module to one (module.float())")
    param = _dt.as_dtype(dtypes.pop()) if dtypes else _dt.float32
    d = _dt.as_dtype(input_dtype) if input_dtype is not None else None
    if d is None and param is not _dt.float32:
        d = param
    if d is not None or input_shape is not None:
        shape = list(input_shape) if input_shape is not None else _first_input(spec)
        if shape is None:
            raise InvalidArgument("the input's shape cannot be inferred; pass input_shape=")
        d = d or (_dt.int64 if spec_first_is_embedding(spec) else _dt.float32)
        spec["input"] = {"dtype": d.name, "shape": shape}
    return spec


def spec_first_is_embedding(spec: Dict[str, Any]) -> bool:
    if spec["type"] == "Embedding":
        return True
    children = spec.get("children", [])
    return bool(children) and spec_first_is_embedding(children[0])


def export_program(torch_module: Any, example_inputs: Sequence[Any],
                   path: Union[str, "os.PathLike[str]"]) -> pathlib.Path:
    """``torch.export.export(module.eval(), example_inputs)`` saved with ``torch.export.save`` to
    ``path`` (a ``.pt2``), the archive ``load_module`` takes (docs/import.md): the graph of ATen
    ops as torch exports it, every node an op of the registry, with static shapes."""
    import torch

    path = pathlib.Path(path)
    if path.suffix != ".pt2":
        raise InvalidArgument(f"{path}: a torch.export archive is named *.pt2")
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = getattr(torch_module, "training", False)
    torch_module.eval()
    try:
        exported = torch.export.export(torch_module, tuple(example_inputs))
    finally:
        if was_training:
            torch_module.train()
    torch.export.save(exported, str(path))
    return path


def export(torch_module: Any, directory: Union[str, "os.PathLike[str]", Sequence[Any]],
           path: Union[str, "os.PathLike[str]", None] = None, *, name: str = "model",
           input_dtype: Any = None, input_shape: Optional[Sequence[int]] = None) -> Any:
    """``export(module, example_inputs, "m.pt2")``: the module as torch.export exports it, saved
    for ``load_module("m.pt2", ...)`` (export_program); returns the path.

    ``export(module, directory)``: writes ``<directory>/<name>.json`` (the spec) and
    ``<directory>/<name>.safetensors`` (the state_dict; with the safetensors package when
    installed, else by hand) and returns both, ready for ``tessera.load_module(exported,
    mesh=...)``."""
    if path is not None:
        if isinstance(directory, (str, pathlib.Path)):
            raise InvalidArgument("export(module, example_inputs, path): example_inputs is a "
                                  "tuple of tensors")
        return export_program(torch_module, directory, path)
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec = module_spec(torch_module, input_dtype=input_dtype, input_shape=input_shape)
    state = {k: v.detach().cpu().contiguous() for k, v in torch_module.state_dict().items()}
    spec_path = directory / f"{name}.json"
    weights_path = directory / f"{name}.safetensors"
    spec_path.write_text(json.dumps(spec, indent=1) + "\n")
    try:
        from safetensors.torch import save_file

        save_file(state, str(weights_path))
    except ImportError:
        _st.write(weights_path, state)
    return Exported(spec, spec_path, weights_path)
