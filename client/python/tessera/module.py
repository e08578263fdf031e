"""Modules on the service: a torch.nn module described by a JSON spec (docs/modules.md) is
loaded onto a mesh from safetensors weights, a dict of tensors, or a seed; ``parallelize_module``
/ ``distribute_module`` shard it; its forward and training steps run on the workers. Parameters
are DTensors named ``<module>.<fqn>``. A module stays on the service until ``remove()``."""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import dtypes as _dt
from . import safetensors as _st
from .dtensor import DTensor
from .errors import InvalidArgument
from .interop import CHUNK_BYTES, as_buffer, wrap_output
from .mesh import DeviceMesh
from .placements import Placement, from_proto
from .progress import Progress, ProgressArg
from .session import Session, get_session
from .transport import inline_tensor, pb, read_inline

__all__ = ["Module", "ModuleOutput", "StepResult", "load_module", "get_module", "list_modules"]

_OUTPUTS = {"full": 0, "local": 1, "both": 2}
# The module a config's model_type keeps its base model under (its base_model_tp_plan is relative
# to it), as transformers names it; import/hf_checkpoint.h's BaseModelPrefix.
_BASE_MODEL_PREFIX = {"llama": "model", "qwen2": "model", "qwen3": "model", "mistral": "model",
                      "mixtral": "model", "gemma": "model", "gemma2": "model", "phi3": "model",
                      "gpt2": "transformer", "bert": "bert"}


@dataclass
class ModuleOutput:
    """What a forward gave: the full output and/or every rank's local output, and how the locals
    make the full one (``placement`` on the module's tensor-parallel mesh dim)."""

    full: Any
    locals: List[Any]
    placement: Placement
    is_dtensor: bool
    tp_mesh_dim: int


@dataclass
class StepResult:
    """A training step's forward output, its loss (output.sum() when that was the loss), and
    each parameter's gradient DTensor by FQN."""

    output: Any
    loss: Optional[float]
    gradients: Dict[str, DTensor] = field(default_factory=dict)
    locals: List[Any] = field(default_factory=list)


def _spec_text(spec: Any) -> str:
    """A spec given as a dict, JSON text or a path to a JSON file, as JSON text."""
    if isinstance(spec, Mapping):
        return json.dumps(dict(spec))
    if isinstance(spec, pathlib.Path) or (isinstance(spec, str) and not spec.lstrip().startswith("{")
                                          and os.path.exists(spec)):
        return pathlib.Path(spec).read_text()
    if isinstance(spec, str):
        return spec
    raise InvalidArgument(f"a module spec is a dict, JSON text or a path, not {type(spec).__name__}")


class Module:
    """A handle to a module on the service; ``module(x)`` runs its forward."""

    def __init__(self, session: Session, info: Any, mesh: Optional[DeviceMesh] = None) -> None:
        self.session = session
        self.mesh = mesh.root_mesh if mesh is not None and mesh.name == info.mesh else None
        self._set(info)

    def _set(self, info: Any, unmatched: Optional[Sequence[str]] = None) -> None:
        self.info = info
        self.name = info.name
        if self.mesh is None or self.mesh.name != info.mesh:
            from .mesh import get_device_mesh

            self.mesh = get_device_mesh(info.mesh, self.session)
        self.unmatched: List[str] = list(unmatched if unmatched is not None else info.unmatched)

    # -- metadata --------------------------------------------------------------------------------

    @property
    def spec(self) -> Dict[str, Any]:
        """The spec, every argument written out."""
        return json.loads(self.info.spec_json)

    @property
    def plan(self) -> Optional[Dict[str, Any]]:
        """The plan applied, as a plan file; None when none was."""
        return json.loads(self.info.plan_json) if self.info.plan_json else None

    @property
    def input_dtype(self) -> _dt.DType:
        return _dt.from_number(self.info.input_dtype)

    @property
    def input_shape(self) -> Tuple[int, ...]:
        """-1 where the size varies."""
        return tuple(self.info.input_shape)

    def named_parameters(self) -> Iterator[Tuple[str, DTensor]]:
        """(fqn, DTensor) of every parameter in state_dict order; the handles do not free them."""
        for p in self.info.parameters:
            info = pb.tensor.TensorInfo(name=p.tensor, mesh=self.info.mesh, meta=p.meta,
                                        state=pb.tensor.READY)
            yield p.fqn, DTensor._adopt(self.session, info, self.mesh, owned=False)

    def parameters(self) -> List[DTensor]:
        return [t for _, t in self.named_parameters()]

    def show(self) -> "Module":
        """Fresh information from the service (layouts, plan, published versions)."""
        self._set(self.session.transport.module_call(
            "ShowModule", pb.module.ShowModuleRequest(name=self.name)))
        return self

    def __repr__(self) -> str:
        return (f"tessera.Module('{self.name}' on mesh '{self.info.mesh}', "
                f"{len(self.info.parameters)} parameters, plan={'yes' if self.info.plan_json else 'none'})")

    # -- plans -----------------------------------------------------------------------------------

    def _parallelize(self, plan_json: str, mesh_dim: str) -> "Module":
        reply = self.session.transport.module_call(
            "ParallelizeModule",
            pb.module.ParallelizeModuleRequest(name=self.name, plan_json=plan_json,
                                               mesh_dim=mesh_dim), transfer=True)
        self._set(reply.module, reply.unmatched)
        return self

    def _distribute(self, partition_json: str) -> "Module":
        reply = self.session.transport.module_call(
            "DistributeModule",
            pb.module.DistributeModuleRequest(name=self.name, partition_json=partition_json),
            transfer=True)
        self._set(reply.module, reply.unmatched)
        return self

    def export_plan(self) -> Optional[Dict[str, Any]]:
        """The plan as a plan file, every argument written out; None when none was applied."""
        reply = self.session.transport.module_call(
            "ExportPlan", pb.module.ExportPlanRequest(name=self.name))
        return json.loads(reply.plan_json) if reply.plan_json else None

    # -- running ---------------------------------------------------------------------------------

    def _input(self, input: Any, locals_: Optional[Sequence[Any]]) -> Tuple[Any, str]:
        message = pb.module.ModuleInput()
        if locals_ is not None:
            buffers = [as_buffer(t) for t in locals_]
            for b in buffers:
                message.locals.append(inline_tensor(b))
            return message, buffers[0].kind if buffers else "numpy"
        b = as_buffer(input)
        message.full.CopyFrom(inline_tensor(b))
        return message, b.kind

    def _output(self, reply: Any, kind: str) -> ModuleOutput:
        full = None
        if reply.HasField("output"):
            dtype, array = read_inline(reply.output, f"the output of module '{self.name}'")
            full = wrap_output(array.copy(), dtype, kind)
        locals_ = []
        for r, t in enumerate(reply.local_outputs):
            dtype, array = read_inline(t, f"rank {r}'s output of module '{self.name}'")
            locals_.append(wrap_output(array.copy(), dtype, kind))
        return ModuleOutput(full, locals_, from_proto(reply.output_layout.placement),
                            reply.output_layout.is_dtensor, reply.tp_mesh_dim)

    @property
    def imported(self) -> Any:
        """For a module loaded from a torch.export archive, its ImportedInfo (source, nodes, the
        user inputs and outputs by name with their layouts, the modules styled); else None."""
        return self.info.imported if self.info.HasField("imported") else None

    def _forward_program(self, inputs: Sequence[Any]) -> Any:
        """An imported program's forward: its user inputs in order, its outputs back."""
        names = [e.name for e in self.info.imported.inputs]
        if len(inputs) != len(names):
            raise InvalidArgument(f"module '{self.name}' takes {len(names)} input(s) "
                                  f"({', '.join(names)}); given {len(inputs)}")
        request = pb.module.ForwardRequest(name=self.name)
        kind = "numpy"
        for k, t in enumerate(inputs):
            b = as_buffer(t)
            kind = b.kind if k == 0 else kind
            target = request.input if k == 0 else request.more_inputs.add()
            target.full.CopyFrom(inline_tensor(b))
        reply = self.session.transport.module_call("Forward", request, transfer=True)
        outs = []
        for o, t in enumerate([reply.output, *reply.more_outputs]):
            dtype, array = read_inline(t, f"output {o} of module '{self.name}'")
            outs.append(wrap_output(array.copy(), dtype, kind))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def forward(self, input: Any = None, *more: Any, locals: Optional[Sequence[Any]] = None,
                outputs: str = "full") -> Any:
        """module(input): the full input (a numpy array or CPU torch tensor), cut by the input
        layout on the workers; or ``locals``, every rank's local input. Returns the full output
        (same kind as the input), or with ``outputs="local"``/``"both"`` a ModuleOutput. A module
        imported from a torch.export archive takes each of its user inputs in order (``more``
        after the first) and returns its output (a tuple of them where it has several)."""
        if self.info.HasField("imported"):
            if locals is not None or outputs != "full":
                raise InvalidArgument(f"module '{self.name}' is a program: its forward takes its "
                                      "inputs full and gives its full outputs")
            return self._forward_program((input, *more))
        if more:
            raise InvalidArgument(f"module '{self.name}' takes one input; given {1 + len(more)}")
        message, kind = self._input(input, locals)
        reply = self.session.transport.module_call(
            "Forward", pb.module.ForwardRequest(name=self.name, input=message,
                                                outputs=_outputs(outputs)), transfer=True)
        out = self._output(reply, kind)
        return out.full if outputs == "full" else out

    __call__ = forward

    def step(self, input: Any, *, grad_output: Any = None, lr: Optional[float] = None,
             momentum: float = 0.0, weight_decay: float = 0.0, outputs: str = "full"
             ) -> StepResult:
        """A training step: forward, ``output.sum().backward()`` (or backward from
        ``grad_output``, the full output's gradient), then with ``lr`` torch.optim.SGD's update
        (momentum, weight_decay). Gradients stay on the service as ``<module>.<fqn>.grad``."""
        message, kind = self._input(input, None)
        request = pb.module.StepRequest(name=self.name, input=message, outputs=_outputs(outputs))
        if grad_output is None:
            request.loss = "sum"
        else:
            request.grad_output.CopyFrom(inline_tensor(as_buffer(grad_output)))
        if lr is not None:
            request.sgd.CopyFrom(pb.worker.SgdOptions(lr=lr, momentum=momentum,
                                                      weight_decay=weight_decay))
        reply = self.session.transport.module_call("Step", request, transfer=True)
        out = self._output(reply.forward, kind)
        loss = None
        if grad_output is None and out.full is not None:
            import numpy as np

            loss = float(np.asarray(out.full, dtype=np.float64).sum()) if kind == "numpy" \
                else float(out.full.double().sum())
        gradients = {}
        for g in reply.gradients:
            info = pb.tensor.TensorInfo(name=g.grad, mesh=self.info.mesh, meta=g.meta,
                                        state=pb.tensor.READY)
            gradients[g.fqn] = DTensor._adopt(self.session, info, self.mesh, owned=False)
        return StepResult(out.full, loss, gradients, out.locals)

    # -- state -----------------------------------------------------------------------------------

    def state_dict(self, gradients: bool = False, *, kind: str = "numpy") -> Dict[str, Any]:
        """Every parameter whole, by state_dict name (with ``gradients``, also "<fqn>.grad")."""
        return {name: wrap_output(array, dtype, kind)
                for name, dtype, array in self.session.transport.save_module(self.name, gradients)}

    def save(self, path: Union[str, "os.PathLike[str]"], gradients: bool = False) -> None:
        """Writes state_dict() as a safetensors file."""
        _st.write(path, self.state_dict(gradients))

    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"], gradients: bool = False
                        ) -> Any:
        """Saves every parameter (with ``gradients``, every gradient too, as "<fqn>.grad") into
        the checkpoint directory ``path`` on the workers' filesystem (absolute;
        docs/checkpoints.md): each worker writes its own blocks, none passes through the
        coordinator or this process. ``load_module(..., checkpoint=path)`` reads it back onto any
        mesh and plan. Returns the reply (path, data_dir, files, saved_layout)."""
        return self.session.transport.module_call(
            "SaveModuleCheckpoint",
            pb.module.SaveModuleCheckpointRequest(name=self.name, path=str(path),
                                                  gradients=gradients),
            transfer=True)

    def publish(self, version: str = "1", *, model: str = "", max_batch_size: int = 0,
                max_queue_delay_us: int = 500) -> Any:
        """Serves the forward over KServe v2 on the coordinator's port as model ``model``
        (default: the module's name), with Triton's dynamic batching when max_batch_size > 0."""
        reply = self.session.transport.module_call("PublishModule", pb.module.PublishModuleRequest(
            name=self.name, model=model, version=str(version), max_batch_size=max_batch_size,
            max_queue_delay_us=max_queue_delay_us))
        return reply.published

    def unpublish(self, version: str = "", *, model: str = "") -> None:
        """Stops serving one version (default: every version)."""
        self.session.transport.module_call("UnpublishModule", pb.module.UnpublishModuleRequest(
            model=model or self.name, version=str(version)))

    def remove(self) -> None:
        """Removes the module: program, parameters, gradients, published versions."""
        self.session.transport.module_call("RemoveModule",
                                           pb.module.RemoveModuleRequest(name=self.name))


def _outputs(outputs: str) -> int:
    if outputs not in _OUTPUTS:
        raise InvalidArgument(f"outputs='{outputs}'; expected one of {', '.join(_OUTPUTS)}")
    return _OUTPUTS[outputs]


def _weights_from_file(path: Union[str, "os.PathLike[str]"]) -> Tuple[Any, Iterator[bytes], int]:
    """The weights' header of a safetensors file and its tensors' bytes in file order, read a
    chunk at a time (never the whole file)."""
    entries, start = _st.read_header(path)
    header = pb.module.WeightsHeader(tensors=[
        pb.module.WeightsEntry(name=e.name, dtype=e.dtype.number,
                               shape=pb.types.Shape(dims=list(e.shape))) for e in entries])

    def data() -> Iterator[bytes]:
        for e in entries:
            yield from _st.tensor_chunks(path, start, e, CHUNK_BYTES)

    return header, data(), sum(e.end - e.begin for e in entries)


def _weights_from_tensors(tensors: Mapping[str, Any]) -> Tuple[Any, Iterator[bytes], int]:
    buffers = [(name, as_buffer(t)) for name, t in tensors.items()]
    header = pb.module.WeightsHeader(tensors=[
        pb.module.WeightsEntry(name=name, dtype=b.dtype.number,
                               shape=pb.types.Shape(dims=list(b.shape))) for name, b in buffers])

    def data() -> Iterator[bytes]:
        for _, b in buffers:
            view = b.bytes_view()
            for at in range(0, len(view), CHUNK_BYTES):
                yield view[at:at + CHUNK_BYTES].tobytes()

    return header, data(), sum(b.nbytes for _, b in buffers)


_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _load_program(path: Union[str, "os.PathLike[str]"], mesh: DeviceMesh, weights: Any,
                  name: str, plan: Any, tp_plan: Any, tp_prefix: str, mesh_dim: Optional[int],
                  progress: ProgressArg) -> Module:
    """load_module of a torch.export archive: its program and weights on one LoadModule stream."""
    from .parallel import plan_json
    from .pt2 import open_archive

    if plan is not None and tp_plan is not None:
        raise InvalidArgument("give plan= (a parallelize_module plan) or tp_plan=, not both")
    if weights is not None and not isinstance(weights, (str, pathlib.Path)):
        raise InvalidArgument("an archive's weights= is a Hugging Face checkpoint directory")
    archive = open_archive(path, weights)
    if tp_plan == "hf":
        # The checkpoint's own plan: its config.json's base_model_tp_plan, under the base model.
        if weights is None:
            raise InvalidArgument('tp_plan="hf" takes the plan of the checkpoint\'s config.json: '
                                  "give weights= (its directory)")
        config = json.loads((pathlib.Path(weights) / "config.json").read_text())
        if not isinstance(config.get("base_model_tp_plan"), dict):
            raise InvalidArgument(f"{weights}/config.json (model_type "
                                  f"'{config.get('model_type', '?')}') carries no "
                                  "base_model_tp_plan: give the plan, such as model.tp_plan")
        tp_plan = config["base_model_tp_plan"]
        tp_prefix = tp_prefix or _BASE_MODEL_PREFIX.get(config.get("model_type", ""), "")
    tp_text = "" if tp_plan is None else (tp_plan if isinstance(tp_plan, str)
                                           else json.dumps(dict(tp_plan)))
    header = pb.module.LoadModuleHeader(
        name=name, mesh=mesh.name, plan_json="" if plan is None else plan_json(plan),
        weights_follow=True,
        program=pb.module.ImportedProgram(
            program_json=archive.program_json, tp_plan_json=tp_text, tp_prefix=tp_prefix,
            mesh_dim=-1 if mesh_dim is None else int(mesh_dim),
            source=pathlib.Path(path).name))
    weights_header = pb.module.WeightsHeader(tensors=[
        pb.module.WeightsEntry(name=w.name, dtype=w.dtype.number,
                               shape=pb.types.Shape(dims=list(w.shape))) for w in archive.weights])
    bar = Progress(sum(w.nbytes for w in archive.weights), f"load_module {name}", progress)

    def data() -> Iterator[bytes]:
        for w in archive.weights:
            for piece in archive.chunks(w, CHUNK_BYTES):
                yield piece
                bar.add(len(piece))

    try:
        info = mesh.session.transport.load_module(header, weights_header, data())
    finally:
        bar.close()
    return Module(mesh.session, info, mesh)


def load_module(spec: Any, *, mesh: DeviceMesh, weights: Any = None, seed: Optional[int] = None,
                name: Optional[str] = None, plan: Any = None, progress: ProgressArg = None,
                checkpoint: Union[str, "os.PathLike[str]", None] = None, tp_plan: Any = None,
                tp_prefix: str = "", mesh_dim: Optional[int] = None,
                example_inputs: Optional[Sequence[Any]] = None) -> Module:
    """Loads a module onto ``mesh``.

    ``spec`` may also be the path of a torch.export archive (``torch.export.save``'s ``.pt2``,
    docs/import.md): its program is read on the coordinator, laid out by ``plan`` (a
    parallelize_module plan) or ``tp_plan`` (a Hugging Face tp_plan, a dict or JSON text, its
    patterns under ``tp_prefix``; ``"hf"``: the checkpoint's config.json's base_model_tp_plan) on
    ``mesh_dim``, its weights from the archive or from
    ``weights``, a Hugging Face checkpoint directory; ``module(*inputs)`` runs it. Or ``spec`` is
    a torch module itself with ``example_inputs``: exported with torch.export first (``tessera.
    export(module, example_inputs, path)``), its weights its own.

    ``spec``: the module spec (dict, JSON text, path to a JSON file, or what tessera.export
    returned). ``weights``: a safetensors path (streamed a chunk at a time) or a dict of tensors
    by state_dict name (a torch ``state_dict()`` too); or ``checkpoint``, a checkpoint directory
    on the workers' filesystem (``Module.save_checkpoint``'s) that the workers read, each only its
    shard's bytes; or ``seed`` to initialize as torch's ``reset_parameters()`` does. ``plan``: a
    parallelize plan applied as it loads (a dict of styles or a plan file). The weights are
    checked against the spec before any byte moves."""
    from .export import Exported
    from .parallel import plan_json

    if example_inputs is not None:
        # A torch module itself: exported (torch.export) to a temporary archive, loaded from it.
        import tempfile

        from .export import export_program

        with tempfile.TemporaryDirectory(prefix="tessera-export-") as tmp:
            path = export_program(spec, example_inputs, pathlib.Path(tmp) / "module.pt2")
            return load_module(path, mesh=mesh, weights=weights, name=name, plan=plan,
                               progress=progress, tp_plan=tp_plan, tp_prefix=tp_prefix,
                               mesh_dim=mesh_dim)
    if isinstance(spec, (str, pathlib.Path)) and str(spec).endswith(".pt2"):
        if seed is not None or checkpoint is not None:
            raise InvalidArgument(f"{spec} is a program: its weights come from the archive or "
                                  "from weights= (a Hugging Face checkpoint directory)")
        name = name or f"module-{secrets.token_hex(4)}"
        if not _NAME.match(name):
            raise InvalidArgument(f"module name '{name}': letters, digits, '_' and '-' only")
        return _load_program(spec, mesh, weights, name, plan, tp_plan, tp_prefix, mesh_dim,
                             progress)
    if tp_plan is not None or mesh_dim is not None or tp_prefix:
        raise InvalidArgument("tp_plan=, tp_prefix= and mesh_dim= lay out a torch.export archive "
                              "(a .pt2); a spec takes plan=")
    if isinstance(spec, Exported):
        if weights is None and seed is None and checkpoint is None:
            weights = spec.weights_path
        spec = spec.spec
    if [weights is None, seed is None, checkpoint is None].count(False) != 1:
        raise InvalidArgument("load_module takes exactly one of weights=, seed= and checkpoint=")
    name = name or f"module-{secrets.token_hex(4)}"
    if not _NAME.match(name):
        raise InvalidArgument(f"module name '{name}': letters, digits, '_' and '-' only")
    session = mesh.session
    header = pb.module.LoadModuleHeader(name=name, mesh=mesh.name, spec_json=_spec_text(spec),
                                        plan_json="" if plan is None else plan_json(plan))
    weights_header, data, total = None, iter(()), 0
    if seed is not None:
        header.seed = int(seed)
    elif checkpoint is not None:
        header.checkpoint = str(checkpoint)
    else:
        header.weights_follow = True
        if isinstance(weights, (str, pathlib.Path)):
            weights_header, data, total = _weights_from_file(weights)
        elif isinstance(weights, Mapping):
            weights_header, data, total = _weights_from_tensors(weights)
        else:
            raise InvalidArgument(f"weights= is a safetensors path or a dict of tensors, not "
                                  f"{type(weights).__name__}")
    bar = Progress(total, f"load_module {name}", progress)

    def counted() -> Iterator[bytes]:
        for piece in data:
            yield piece
            bar.add(len(piece))

    try:
        info = session.transport.load_module(header, weights_header, counted())
    finally:
        bar.close()
    return Module(session, info, mesh)


def get_module(name: str, session: Optional[Session] = None) -> Module:
    """An existing module by name; NotFound naming it if there is none."""
    s = get_session(session)
    return Module(s, s.transport.module_call("ShowModule", pb.module.ShowModuleRequest(name=name)))


def list_modules(session: Optional[Session] = None) -> List[Any]:
    """Every module's ModuleInfo, ordered by name."""
    s = get_session(session)
    return list(s.transport.module_call("ListModules", pb.module.ListModulesRequest()).modules)
