"""``torch.distributed.tensor.parallel`` on the service: the five parallel styles, and
``parallelize_module`` / ``distribute_module``, which send a plan file (docs/modules.md, "Plan
files") to the coordinator; it compiles the plan once, redistributes every
parameter to its placements and installs the program on the workers."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .errors import InvalidArgument, Unimplemented
from .mesh import DeviceMesh
from .placements import Placement, as_placement

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
           "PrepareModuleInput", "PrepareModuleOutput", "plan_json", "partition_json",
           "parallelize_module", "distribute_module", "loss_parallel"]

_Layout = Optional[Union[Placement, str]]
_Layouts = Optional[Union[_Layout, Sequence[_Layout]]]


def _one(layout: Any, what: str) -> Optional[str]:
    """A layout of Colwise/RowwiseParallel: one placement (or a tuple of one), None for torch's
    default."""
    if layout is None:
        return None
    if isinstance(layout, (list, tuple)):
        if len(layout) != 1:
            raise InvalidArgument(f"{what} takes one layout (its module has one input), not "
                                  f"{len(layout)}")
        layout = layout[0]
    return as_placement(layout).to_json()


def _many(layouts: Any) -> Any:
    """A layout argument of PrepareModuleInput/Output: a placement, None, or a list of them."""
    if isinstance(layouts, (list, tuple)):
        return [None if p is None else as_placement(p).to_json() for p in layouts]
    return None if layouts is None else as_placement(layouts).to_json()


class ParallelStyle:
    """A parallel style; ``to_json()`` is its entry in a plan file."""

    def to_json(self) -> Dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_json().items() if k != "style")
        return f"{type(self).__name__}({args})"


class ColwiseParallel(ParallelStyle):
    """Linear weight and bias Shard(0), Embedding weight Shard(1); input annotated with
    ``input_layouts`` (default Replicate), output redistributed to ``output_layouts`` (default
    Shard(-1))."""

    def __init__(self, *, input_layouts: _Layout = None, output_layouts: _Layout = None,
                 use_local_output: bool = True) -> None:
        self.input_layouts = _one(input_layouts, type(self).__name__ + ".input_layouts")
        self.output_layouts = _one(output_layouts, type(self).__name__ + ".output_layouts")
        self.use_local_output = bool(use_local_output)

    def to_json(self) -> Dict[str, Any]:
        return {"style": type(self).__name__, "input_layouts": self.input_layouts,
                "output_layouts": self.output_layouts, "use_local_output": self.use_local_output}


class RowwiseParallel(ColwiseParallel):
    """Linear weight Shard(1) and bias Replicate, Embedding weight Shard(0); input
    ``input_layouts`` (default Shard(-1)), the partial output reduced to ``output_layouts``
    (default Replicate)."""


class SequenceParallel(ParallelStyle):
    """LayerNorm, RMSNorm, Dropout (or a module without parameters) on inputs sharded along
    ``sequence_dim``; parameters replicated."""

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False) -> None:
        self.sequence_dim = int(sequence_dim)
        self.use_local_output = bool(use_local_output)

    def to_json(self) -> Dict[str, Any]:
        return {"style": "SequenceParallel", "sequence_dim": self.sequence_dim,
                "use_local_output": self.use_local_output}


class PrepareModuleInput(ParallelStyle):
    """Annotates a module's input with ``input_layouts`` and redistributes it to
    ``desired_input_layouts``, leaving its parameters alone. Keyword-argument layouts are
    unsupported: modules here take one input."""

    def __init__(self, *, input_layouts: _Layouts = None, desired_input_layouts: _Layouts = None,
                 input_kwarg_layouts: Optional[Mapping[str, Any]] = None,
                 desired_input_kwarg_layouts: Optional[Mapping[str, Any]] = None,
                 use_local_output: bool = False) -> None:
        if input_kwarg_layouts or desired_input_kwarg_layouts:
            raise Unimplemented("PrepareModuleInput's keyword-argument layouts: modules on the "
                                "service take one input")
        self.input_layouts = _many(input_layouts)
        self.desired_input_layouts = _many(desired_input_layouts)
        self.use_local_output = bool(use_local_output)

    def to_json(self) -> Dict[str, Any]:
        return {"style": "PrepareModuleInput", "input_layouts": self.input_layouts,
                "desired_input_layouts": self.desired_input_layouts,
                "use_local_output": self.use_local_output}


class PrepareModuleOutput(ParallelStyle):
    """Annotates a module's output with ``output_layouts`` and redistributes it to
    ``desired_output_layouts``."""

    def __init__(self, *, output_layouts: _Layouts, desired_output_layouts: _Layouts,
                 use_local_output: bool = True) -> None:
        self.output_layouts = _many(output_layouts)
        self.desired_output_layouts = _many(desired_output_layouts)
        self.use_local_output = bool(use_local_output)

    def to_json(self) -> Dict[str, Any]:
        return {"style": "PrepareModuleOutput", "output_layouts": self.output_layouts,
                "desired_output_layouts": self.desired_output_layouts,
                "use_local_output": self.use_local_output}


def _mesh_dim(device_mesh: Optional[DeviceMesh]) -> Optional[str]:
    """The plan's mesh dim for parallelize_module's mesh: a 1-D view or a 1-D mesh."""
    if device_mesh is None:
        return None
    if device_mesh.ndim != 1:
        raise InvalidArgument(f"parallelize_module takes a 1-D mesh; slice {device_mesh!r} to "
                              "one dim first (mesh[\"tp\"])")
    d = device_mesh.dims[0]
    names = device_mesh.root_mesh.mesh_dim_names
    return names[d] if names else str(d)


def plan_json(parallelize_plan: Union[ParallelStyle, Mapping[str, Any], str],
              mesh_dim: Optional[str] = None) -> str:
    """A parallelize_module plan file: {"mesh_dim": ..., "plan": {pattern: style}} from a style
    (for the root module) or a dict of fnmatch patterns to styles (a dict already in the file's
    form, or its JSON text, passes as it is)."""
    if isinstance(parallelize_plan, str):
        return parallelize_plan
    if isinstance(parallelize_plan, ParallelStyle):
        plan: Any = {"": parallelize_plan.to_json()}
    elif isinstance(parallelize_plan, Mapping):
        if "plan" in parallelize_plan and not isinstance(parallelize_plan["plan"], ParallelStyle):
            return json.dumps(dict(parallelize_plan))
        plan = {}
        for pattern, style in parallelize_plan.items():
            if isinstance(style, ParallelStyle):
                plan[pattern] = style.to_json()
            elif isinstance(style, (str, dict)):
                plan[pattern] = style
            else:
                raise InvalidArgument(f"plan[{pattern!r}] = {style!r} is not a ParallelStyle")
    else:
        raise InvalidArgument(f"a parallelize_plan is a ParallelStyle or a dict of them, not "
                              f"{type(parallelize_plan).__name__}")
    out: Dict[str, Any] = {}
    if mesh_dim is not None:
        out["mesh_dim"] = mesh_dim
    out["plan"] = plan
    return json.dumps(out)


def partition_json(partition: Mapping[str, Any], mesh_ndim: int) -> str:
    """A distribute_module partition file: {"distribute": {pattern: [placement per mesh dim]}}."""
    if "distribute" in partition:
        return json.dumps(dict(partition))
    out: Dict[str, List[str]] = {}
    for pattern, placements in partition.items():
        if isinstance(placements, (Placement, str)):
            placements = [placements]
        out[pattern] = [as_placement(p).to_json() for p in placements]
        if len(out[pattern]) != mesh_ndim and len(out[pattern]) != 1:
            raise InvalidArgument(f"partition[{pattern!r}] has {len(out[pattern])} placements "
                                  f"for a {mesh_ndim}-D mesh")
    return json.dumps({"distribute": out})


def parallelize_module(module: Any, device_mesh: Optional[DeviceMesh] = None,
                       parallelize_plan: Union[ParallelStyle, Mapping[str, Any], str, None] = None,
                       ) -> Any:
    """torch's ``parallelize_module(module, mesh["tp"], plan)``: ``module`` is a loaded
    tessera Module; the plan's patterns match like torch's (fnmatch per dotted token). Returns
    the module, updated in place; ``module.unmatched`` lists patterns that matched nothing (torch
    warns about them)."""
    if parallelize_plan is None:
        raise InvalidArgument("parallelize_module needs a parallelize_plan")
    if device_mesh is not None and device_mesh.name != module.mesh.name:
        raise InvalidArgument(f"module '{module.name}' lives on mesh '{module.mesh.name}', not "
                              f"'{device_mesh.name}'")
    dim = _mesh_dim(device_mesh)
    return module._parallelize(plan_json(parallelize_plan, dim), dim or "")


def distribute_module(module: Any, device_mesh: Optional[DeviceMesh] = None,
                      partition_fn: Union[Mapping[str, Any], Callable[..., Any], None] = None,
                      input_fn: Optional[Callable[..., Any]] = None,
                      output_fn: Optional[Callable[..., Any]] = None) -> Any:
    """torch's ``distribute_module``, with the partition as a dict of parameter-FQN patterns
    to placements (one per mesh dim; Shard or Replicate; unmatched parameters Replicate):
    ``{"net1.weight": [Shard(0)], "*.bias": Replicate()}``. Callables are unsupported (the
    service runs no Python)."""
    if callable(partition_fn) or input_fn is not None or output_fn is not None:
        raise Unimplemented("distribute_module with Python callables: give the partition as a "
                            "dict of FQN patterns to placements")
    if device_mesh is not None and device_mesh.name != module.mesh.name:
        raise InvalidArgument(f"module '{module.name}' lives on mesh '{module.mesh.name}', not "
                              f"'{device_mesh.name}'")
    return module._distribute(partition_json(partition_fn or {}, module.mesh.ndim))


@contextlib.contextmanager
def loss_parallel() -> Any:
    """torch.distributed.tensor.parallel.loss_parallel: inside it, F.cross_entropy requires its
    logits sharded on the class dim, as torch's does. The computation is the same outside it:
    cross_entropy on class-sharded logits never gathers them here (the loss is a Partial(sum))."""
    from . import nn_functional
    previous = getattr(nn_functional._loss_parallel, "active", False)
    nn_functional._loss_parallel.active = True
    try:
        yield
    finally:
        nn_functional._loss_parallel.active = previous
