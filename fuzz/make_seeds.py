#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/): valid inputs of each kind, small
enough for libFuzzer to mutate quickly. Needs numpy and protobuf (python3-numpy, python3-protobuf)
and protoc. Run from anywhere; the corpus is checked in, so this runs only to change it."""

import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def npy_seeds():
    import io
    arrays = {
        "f32_2x3": np.arange(6, dtype="<f4").reshape(2, 3),
        "f64_scalar": np.array(2.5, dtype="<f8"),
        "f16_4": np.array([1, -2, 0.5, 65504], dtype="<f2"),
        "i8_empty": np.zeros((0, 3), dtype="|i1"),
        "u8_3d": np.arange(8, dtype="|u1").reshape(2, 2, 2),
        "i32_5": np.arange(5, dtype="<i4"),
        "i64_2x2": np.array([[1, -1], [2**40, 0]], dtype="<i8"),
        "bool_3": np.array([True, False, True]),
    }
    for name, a in arrays.items():
        buf = io.BytesIO()
        np.save(buf, a)
        write("npy", name + ".npy", buf.getvalue())
    # Format 2.0: a 4-byte header length.
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.arange(4, dtype="<f4"), version=(2, 0))
    write("npy", "v2_f32_4.npy", buf.getvalue())


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    f32 = np.arange(6, dtype="<f4").tobytes()
    write("safetensors", "one.safetensors", safetensors({"w": ("F32", [2, 3], f32)}))
    write("safetensors", "meta.safetensors", safetensors(
        {"a": ("I64", [2], np.array([1, 2], "<i8").tobytes()), "b": ("BF16", [1], b"\x80\x3f"),
         "c": ("BOOL", [0], b"")},
        {"tessera.placements": "(S(0),)", "tessera.mesh_shape": "2", "format": "pt"}))
    write("safetensors", "scalar.safetensors", safetensors({"s": ("F64", [], struct.pack("<d", 1.5))}))
    write("safetensors", "empty.safetensors", safetensors({}))


def pt2_seeds():
    """Small archives laid out as torch.export.save writes them (the real ones are in
    tests/fixtures/export/, too large to mutate quickly): stored and deflated, with and without
    archive_format."""
    import io
    import zipfile

    graph = {"schema_version": {"major": 8, "minor": 20}, "torch_version": "2.15.0",
             "graph_module": {"graph": {"nodes": [
                 {"target": "torch.ops.aten.mm.default", "inputs": [], "outputs": []},
                 {"target": "torch.ops.aten.softmax.int", "inputs": [], "outputs": []},
                 {"target": "_operator.getitem", "inputs": [], "outputs": []}]}}}
    for name, compression, fmt in [("stored", zipfile.ZIP_STORED, True),
                                   ("deflated", zipfile.ZIP_DEFLATED, True),
                                   ("no_format", zipfile.ZIP_STORED, False)]:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression) as z:
            if fmt:
                z.writestr("m/archive_format", "pt2")
            z.writestr("m/models/model.json", json.dumps(graph))
            z.writestr("m/data/weights/weight_0", bytes(16))
        write("pt2", f"{name}.pt2", buf.getvalue())

    # A whole program: a parameter and an input, linear, relu and a split of two outputs, with its
    # signature, recorded metas, module stack and the parameter's stored bytes.
    def meta(*sizes):
        strides = [1] * len(sizes)
        for d in range(len(sizes) - 2, -1, -1):
            strides[d] = strides[d + 1] * sizes[d + 1]
        return {"dtype": 7, "sizes": [{"as_int": n} for n in sizes],
                "strides": [{"as_int": n} for n in strides], "storage_offset": {"as_int": 0}}

    def arg(name, value, kind=1):
        return {"name": name, "arg": value, "kind": kind}

    stack = "L__self__,,M;L__self___fc,fc,torch.nn.modules.linear.Linear"
    program = {"schema_version": {"major": 8, "minor": 20}, "graph_module": {
        "graph": {"nodes": [
            {"target": "torch.ops.aten.linear.default", "name": "linear",
             "inputs": [arg("input", {"as_tensor": {"name": "x"}}),
                        arg("weight", {"as_tensor": {"name": "p_fc_weight"}})],
             "outputs": [{"as_tensor": {"name": "linear"}}],
             "metadata": {"nn_module_stack": stack}},
            {"target": "torch.ops.aten.relu.default", "name": "relu",
             "inputs": [arg("self", {"as_tensor": {"name": "linear"}})],
             "outputs": [{"as_tensor": {"name": "relu"}}]},
            {"target": "torch.ops.aten.split.Tensor", "name": "split",
             "inputs": [arg("self", {"as_tensor": {"name": "relu"}}),
                        arg("split_size", {"as_int": 2}), arg("dim", {"as_int": -1})],
             "outputs": [{"as_tensors": [{"name": "s0"}, {"name": "s1"}]}]}],
            "tensor_values": {"x": meta(2, 3), "p_fc_weight": meta(4, 3), "linear": meta(2, 4),
                              "relu": meta(2, 4), "s0": meta(2, 2), "s1": meta(2, 2)}},
        "signature": {
            "input_specs": [
                {"parameter": {"arg": {"name": "p_fc_weight"}, "parameter_name": "fc.weight"}},
                {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
            "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "s1"}}}}]}}}
    weights = {"config": {"fc.weight": {"path_name": "weight_0", "is_param": True,
                                        "use_pickle": False, "tensor_meta": meta(4, 3)}}}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("m/archive_format", "pt2")
        z.writestr("m/byteorder", "little")
        z.writestr("m/models/model.json", json.dumps(program))
        z.writestr("m/data/weights/model_weights_config.json", json.dumps(weights))
        z.writestr("m/data/weights/weight_0", bytes(48))
    write("pt2", "program.pt2", buf.getvalue())
    write("exported_program", "program.json", json.dumps(program))


def json_seeds():
    mlp = {"type": "Module", "input": {"dtype": "float32", "shape": [-1, 16]}, "children": [
        {"name": "net1", "type": "Linear", "in_features": 16, "out_features": 32},
        {"name": "relu", "type": "ReLU"},
        {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 16, "bias": False}]}
    block = {"type": "Module", "input": {"dtype": "float64", "shape": [-1, -1, 8]}, "children": [
        {"name": "attn", "type": "Module", "residual": True, "children": [
            {"name": "norm", "type": "LayerNorm", "normalized_shape": 8},
            {"name": "attention", "type": "Attention", "dim": 8, "n_heads": 4, "causal": True}]},
        {"name": "mlp", "type": "Module", "residual": True, "children": [
            {"name": "norm", "type": "RMSNorm", "normalized_shape": 8},
            {"name": "net1", "type": "Linear", "in_features": 8, "out_features": 32},
            {"name": "act", "type": "GELU", "approximate": "tanh"},
            {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 8}]}]}
    embed = {"type": "Module", "input": {"dtype": "int64", "shape": [-1, -1]}, "children": [
        {"name": "tok", "type": "Embedding", "num_embeddings": 20, "embedding_dim": 8},
        {"name": "head", "type": "Linear", "in_features": 8, "out_features": 20}]}
    for name, spec in {"mlp": mlp, "block": block, "embedding": embed}.items():
        write("module_spec", name + ".json", json.dumps(spec))
    plans = {
        "mlp": {"plan": {"net1": "ColwiseParallel", "net2": "RowwiseParallel"}},
        "megatron": {"plan": {"attn.attention.[qkv]": "ColwiseParallel",
                              "attn.attention.o": "RowwiseParallel",
                              "mlp.net1": "ColwiseParallel", "mlp.net2": "RowwiseParallel"}},
        "sequence": {"plan": {
            "attn.norm": "SequenceParallel",
            "attn.attention.[qkv]": {"style": "ColwiseParallel", "input_layouts": "Shard(1)"},
            "attn.attention.o": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
            "mlp.net1": {"style": "ColwiseParallel", "input_layouts": "Shard(1)",
                         "use_local_output": False}}},
    }
    for name, plan in plans.items():
        write("plan_spec", name + ".json", json.dumps(plan))


def placement_seeds():
    for i, text in enumerate([
            "4\nS(0)\n8,6", "2,2\nS(0),S(1)\n8,6", "2,2\n(Shard(1), Partial(sum))\n5,7",
            "3\nR\n10", "2,2,2\n[Shard(dim=0), Partial(reduce_op='max'), R]\n9,9,9",
            "5\nS(-1)\n3,2", "1\nP(avg)\n"]):
        write("placement_mesh", "case%d.txt" % i, text)


def proto_seeds():
    with tempfile.TemporaryDirectory() as out:
        protos = [os.path.join("tessera", "v1", f)
                  for f in sorted(os.listdir(os.path.join(ROOT, "proto", "tessera", "v1")))]
        subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--python_out=" + out] + protos,
                       check=True)
        sys.path.insert(0, out)
        types = importlib.import_module("tessera.v1.types_pb2")
        tensor = importlib.import_module("tessera.v1.tensor_pb2")
        worker = importlib.import_module("tessera.v1.worker_pb2")
        program = importlib.import_module("tessera.v1.program_pb2")

        def emit(selector, name, message):
            write("proto_convert", name, bytes([selector]) + message.SerializeToString())

        mesh = types.MeshSpec(device_type="cpu", shape=[2, 2], dim_names=["dp", "tp"])
        emit(0, "mesh", mesh)
        emit(0, "mesh_ranks", types.MeshSpec(device_type="cuda", shape=[3], ranks=[2, 0, 1]))
        meta = types.DTensorMeta(shape=types.Shape(dims=[8, 6]), dtype=types.FLOAT32, mesh=mesh)
        meta.placements.add().shard.dim = 0
        meta.placements.add().partial.op = types.MAX
        emit(1, "meta", meta)
        plan = types.RedistributePlan()
        step = plan.steps.add(mesh_dim=0, collective=2, send_bytes=64, recv_bytes=128)
        step.from_placement.shard.dim = 0
        step.to_placement.replicate.SetInParent()
        emit(2, "plan", plan)
        emit(3, "op_add", tensor.OpCall(kind=tensor.OP_ADD))
        emit(3, "op_sum", tensor.OpCall(kind=tensor.OP_SUM, dims=[0, -1], keepdim=True))
        emit(4, "inline", worker.InlineTensor(dtype=types.FLOAT32, shape=types.Shape(dims=[2]),
                                              data=struct.pack("<2f", 1, 2)))
        p = program.Program(tp_mesh_dim=0, input_dtype=types.FLOAT32,
                            input_shape=types.Shape(dims=[-1, 4]), output_rank=2,
                            output_dtype=types.FLOAT32, output_features=4, num_buffers=2, output=1)
        p.input_layout.placement.replicate.SetInParent()
        p.output_layout.placement.replicate.SetInParent()
        param = p.parameters.add(fqn="net1.weight", shape=types.Shape(dims=[4, 4]),
                                 tensor="w", grad="gw", momentum="mw")
        param.placements.add().shard.dim = 0
        p.forward.add(kind=1, inputs=[0], outputs=[1], weight=0, bias=-1, weight_buffer=-1,
                      bias_buffer=-1, weight_grad_buffer=-1, bias_grad_buffer=-1, module="net1")
        emit(5, "program", p)


if __name__ == "__main__":
    npy_seeds()
    safetensors_seeds()
    pt2_seeds()
    json_seeds()
    placement_seeds()
    proto_seeds()
