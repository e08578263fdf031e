"""torch.export archives (``torch.export.save``'s ``.pt2``) as ``load_module`` sends them, read
without torch: the program's JSON (which the coordinator reads into registered ops), every
parameter, buffer and constant by ``state_dict`` name with the dtype and shape the program
records, and each one's bytes, from the archive or from a Hugging Face checkpoint directory
(``config.json`` with ``model.safetensors`` or a sharded ``model.safetensors.index.json``), one
tensor at a time. The C++ client's reader is ``import/program_weights.h``; docs/import.md."""

from __future__ import annotations

import json
import os
import pathlib
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Tuple, Union

from . import dtypes as _dt
from . import safetensors as _st
from .errors import InvalidArgument, Unimplemented

__all__ = ["Archive", "Weight", "open_archive"]

# torch/_export/serde/schema.py's ScalarType codes.
_SCALAR = {1: _dt.uint8, 2: _dt.int8, 4: _dt.int32, 5: _dt.int64, 6: _dt.float16, 7: _dt.float32,
           8: _dt.float64, 12: _dt.bool, 13: _dt.bfloat16}
_KINDS = {"parameter": "parameter_name", "buffer": "buffer_name",
          "tensor_constant": "tensor_constant_name"}
_MAX_JSON = 256 << 20


@dataclass
class Weight:
    """One tensor a program takes besides its user inputs."""

    name: str                  # state_dict name
    kind: str                  # "parameter", "buffer", "tensor_constant"
    dtype: _dt.DType
    shape: Tuple[int, ...]
    source: Tuple[str, Any]    # ("archive", zip entry) or ("checkpoint", (file, entry, start))

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


def _meta(values: Dict[str, Any], name: str, where: str) -> Tuple[_dt.DType, Tuple[int, ...]]:
    meta = values.get(name)
    if not isinstance(meta, dict):
        raise InvalidArgument(f"{where}: value '{name}' has no entry in tensor_values")
    code = meta.get("dtype")
    if code not in _SCALAR:
        raise InvalidArgument(f"{where}: value '{name}' has scalar type {code!r}, which Tessera "
                              "does not hold")
    shape = []
    for s in meta.get("sizes", []):
        if not isinstance(s, dict) or "as_int" not in s:
            raise Unimplemented(f"{where}: value '{name}' has a symbolic size; export with static "
                                "shapes")
        shape.append(int(s["as_int"]))
    return _SCALAR[code], tuple(shape)


class Archive:
    """An archive opened: its program's JSON, its user inputs and outputs by name, its weights."""

    def __init__(self, path: Union[str, "os.PathLike[str]"],
                 checkpoint: Union[str, "os.PathLike[str]", None] = None) -> None:
        self.path = pathlib.Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as error:
            raise InvalidArgument(f"{self.path}: not a zip archive ({error})") from None
        names = self._zip.namelist()
        models = sorted(n for n in names if n.count("/") == 2 and n.split("/")[1] == "models"
                        and n.endswith(".json"))
        if not models:
            raise InvalidArgument(f"{self.path}: no <name>/models/*.json: not a torch.export "
                                  "archive")
        self.folder = models[0].split("/")[0]
        info = self._zip.getinfo(models[0])
        if info.file_size > _MAX_JSON:
            raise InvalidArgument(f"{self.path}: the model is {info.file_size} bytes; at most "
                                  f"{_MAX_JSON}")
        self.program_json = self._zip.read(models[0]).decode("utf-8", errors="replace")
        try:
            model = json.loads(self.program_json)
            graph = model["graph_module"]["graph"]
            signature = model["graph_module"]["signature"]
            values = graph["tensor_values"]
            specs = signature["input_specs"]
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgument(f"{self.path}: the program does not read ({error})") from None
        stored = self._stored()
        self.inputs: List[Tuple[str, _dt.DType, Tuple[int, ...]]] = []
        self.weights: List[Weight] = []
        for i, spec in enumerate(specs):
            where = f"{self.path}: input {i}"
            kind = next(iter(spec), "?")
            body = spec.get(kind, {})
            if kind == "user_input":
                name = body["arg"]["as_tensor"]["name"]
                self.inputs.append((name, *_meta(values, name, where)))
                continue
            if kind not in _KINDS:
                raise Unimplemented(f"{where} is {kind}; import takes parameters, buffers, tensor "
                                    "constants and tensor inputs")
            target = body[_KINDS[kind]]
            dtype, shape = _meta(values, body["arg"]["name"], where)
            if target not in stored:
                raise InvalidArgument(f"{self.path} stores no value for {kind} '{target}'")
            self.weights.append(Weight(target, kind, dtype, shape, ("archive", stored[target])))
        self.outputs = [s["user_output"]["arg"]["as_tensor"]["name"]
                        for s in signature.get("output_specs", []) if "user_output" in s]
        if checkpoint is not None:
            self._use_checkpoint(pathlib.Path(checkpoint), stored)

    def _stored(self) -> Dict[str, str]:
        """Every stored tensor's zip entry by state_dict name (tied names share one entry)."""
        stored: Dict[str, str] = {}
        for folder, config in (("weights", "model_weights_config.json"),
                               ("constants", "model_constants_config.json")):
            entry = f"{self.folder}/data/{folder}/{config}"
            try:
                text = self._zip.read(entry)
            except KeyError:
                continue
            for name, e in json.loads(text).get("config", {}).items():
                if e.get("use_pickle"):
                    raise Unimplemented(f"{self.path}: '{name}' is stored pickled; import reads "
                                        "raw tensor files only")
                stored[name] = f"{self.folder}/data/{folder}/{e['path_name']}"
        return stored

    def _use_checkpoint(self, directory: pathlib.Path, stored: Dict[str, str]) -> None:
        """Takes each weight from the checkpoint by name, or by the name it shares an archive entry
        with (a tied weight stored once); buffers and constants it lacks from the archive."""
        if not (directory / "config.json").exists():
            raise InvalidArgument(f"{directory}: no config.json: not a Hugging Face checkpoint")
        index = directory / "model.safetensors.index.json"
        files = (sorted(set(json.loads(index.read_text())["weight_map"].values()))
                 if index.exists() else ["model.safetensors"])
        held: Dict[str, Tuple[pathlib.Path, Any, int]] = {}
        for f in files:
            entries, start = _st.read_header(directory / f)
            for e in entries:
                held[e.name] = (directory / f, e, start)
        by_entry: Dict[str, List[str]] = {}
        for name, entry in stored.items():
            by_entry.setdefault(entry, []).append(name)
        taken = set()
        for w in self.weights:
            names = [w.name] + [n for n in by_entry.get(stored[w.name], []) if n != w.name]
            found = next((n for n in names if n in held), None)
            if found is None:
                if w.kind == "parameter":
                    raise InvalidArgument(f"{directory} lacks parameter '{w.name}'")
                continue
            file, e, start = held[found]
            if e.dtype != w.dtype or tuple(e.shape) != w.shape:
                raise InvalidArgument(
                    f"{directory}: '{found}' is {e.dtype.name}{list(e.shape)}; the program takes "
                    f"'{w.name}' as {w.dtype.name}{list(w.shape)}")
            w.source = ("checkpoint", (file, e, start))
            taken.add(found)
        extra = sorted(set(held) - taken)
        if extra:
            raise InvalidArgument(f"{directory} holds '{extra[0]}', which no input of the program "
                                  "takes")

    def chunks(self, w: Weight, size: int) -> Iterator[bytes]:
        """The bytes of `w`, `size` at a time."""
        kind, where = w.source
        if kind == "archive":
            with self._zip.open(where) as f:
                left = w.nbytes
                while left > 0:
                    piece = f.read(min(size, left))
                    if not piece:
                        raise InvalidArgument(f"{self.path}: tensor '{w.name}' is cut short")
                    left -= len(piece)
                    yield piece
            return
        file, e, start = where
        yield from _st.tensor_chunks(file, start, e, size)


def open_archive(path: Union[str, "os.PathLike[str]"],
                 checkpoint: Union[str, "os.PathLike[str]", None] = None) -> Archive:
    """The archive at `path`, its weights from `checkpoint` (a Hugging Face checkpoint directory)
    where given."""
    return Archive(path, checkpoint)
