"""The single-process side of cli_module_test.sh, in numpy (float64).

  cli_module_mlp.py write DIR          spec.json, weights.safetensors (float32), bad.safetensors
                                       (net1.weight transposed), x.npy, plan.json, part.json,
                                       part_sharded.json
  cli_module_mlp.py forward DIR Y.npy [P.safetensors]
                                       exits 1 unless Y equals relu(x W1^T + b1) W2^T + b2 (the
                                       weights written, or those of P)
  cli_module_mlp.py step DIR P.safetensors G.safetensors
                                       exits 1 unless P holds the parameters after one SGD step
                                       (lr 0.25, loss output.sum()) and G (and P's "<fqn>.grad")
                                       the gradients, worked out by hand
  cli_module_mlp.py same A.npy B.npy   exits 1 unless A and B are equal
"""
import json
import struct
import sys

import numpy as np

IN, HIDDEN, OUT, ROWS = 10, 16, 12, 5
LR = 0.25
TOLERANCE = 1e-4  # float32 on the workers against float64 here

SPEC = {"type": "Module", "children": [
    {"name": "net1", "type": "Linear", "in_features": IN, "out_features": HIDDEN},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": HIDDEN, "out_features": OUT}],
    "input": {"dtype": "float32", "shape": [-1, IN]}}
# torch's Megatron MLP plan, and a pattern that matches no module (reported, not refused).
PLAN = {"plan": {"net1": "ColwiseParallel", "net2": "RowwiseParallel", "head": "ColwiseParallel"}}
# distribute_module partitions: every parameter Replicate, and net1.weight sharded by columns.
PARTITION = {"distribute": {"*.weight": ["Replicate()"], "*.bias": "Replicate()"}}
SHARDED_PARTITION = {"distribute": {"net1.weight": ["Shard(1)"]}}


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = np.ascontiguousarray(t, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    dtypes = {"F32": "<f4", "F64": "<f8"}
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        out[name] = np.frombuffer(data, dtype=dtypes[e["dtype"]]).reshape(e["shape"])
    return out


def weights(rng):
    return {"net1.weight": rng.standard_normal((HIDDEN, IN)).astype(np.float32) * 0.5,
            "net1.bias": rng.standard_normal(HIDDEN).astype(np.float32) * 0.5,
            "net2.weight": rng.standard_normal((OUT, HIDDEN)).astype(np.float32) * 0.5,
            "net2.bias": rng.standard_normal(OUT).astype(np.float32) * 0.5}


def load(d, weights_path=None):
    path = weights_path or f"{d}/weights.safetensors"
    w = {k: v.astype(np.float64) for k, v in read_safetensors(path).items()}
    return w, np.load(f"{d}/x.npy").astype(np.float64)


def forward(w, x):
    z = x @ w["net1.weight"].T + w["net1.bias"]
    return np.maximum(z, 0) @ w["net2.weight"].T + w["net2.bias"], z


def gradients(w, x):
    """d(output.sum())/d(parameter), by hand."""
    y, z = forward(w, x)
    h = np.maximum(z, 0)
    dy = np.ones_like(y)
    dz = (dy @ w["net2.weight"]) * (z > 0)
    return {"net1.weight": dz.T @ x, "net1.bias": dz.sum(0),
            "net2.weight": dy.T @ h, "net2.bias": dy.sum(0)}


def check(what, got, want):
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        sys.exit(f"{what}: shape {got.shape}, want {want.shape}")
    err = np.max(np.abs(got - want)) if want.size else 0.0
    if err > TOLERANCE * max(1.0, np.max(np.abs(want))):
        sys.exit(f"{what}: off by {err}\ngot\n{got}\nwant\n{want}")
    print(f"{what}: matches numpy (max error {err:.2e})")


def main():
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "write":
        rng = np.random.default_rng(7)
        w = weights(rng)
        json.dump(SPEC, open(f"{d}/spec.json", "w"), indent=1)
        json.dump(PLAN, open(f"{d}/plan.json", "w"), indent=1)
        json.dump(PARTITION, open(f"{d}/part.json", "w"), indent=1)
        json.dump(SHARDED_PARTITION, open(f"{d}/part_sharded.json", "w"), indent=1)
        write_safetensors(f"{d}/weights.safetensors", w)
        bad = dict(w, **{"net1.weight": w["net1.weight"].T.copy()})
        write_safetensors(f"{d}/bad.safetensors", bad)
        np.save(f"{d}/x.npy", rng.standard_normal((ROWS, IN)).astype(np.float32))
    elif cmd == "forward":
        w, x = load(d, sys.argv[4] if len(sys.argv) > 4 else None)
        check(sys.argv[3], np.load(sys.argv[3]), forward(w, x)[0])
    elif cmd == "step":
        w, x = load(d)
        g = gradients(w, x)
        params = read_safetensors(sys.argv[3])
        grads = read_safetensors(sys.argv[4])
        if sorted(params) != sorted(list(w) + [f"{k}.grad" for k in w]):
            sys.exit(f"{sys.argv[3]} holds {sorted(params)}")
        if sorted(grads) != sorted(f"{k}.grad" for k in w):
            sys.exit(f"{sys.argv[4]} holds {sorted(grads)}")
        for k in w:
            check(f"{k} after SGD", params[k], w[k] - LR * g[k])
            check(f"{k}.grad (--grads-out)", grads[f"{k}.grad"], g[k])
            check(f"{k}.grad (save --grads)", params[f"{k}.grad"], g[k])
    elif cmd == "same":
        a, b = np.load(d), np.load(sys.argv[3])
        if a.shape != b.shape or not np.array_equal(a, b):
            sys.exit(f"{d} and {sys.argv[3]} differ")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
