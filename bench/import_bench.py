"""A Llama-shaped model from transformers (hidden 1024, 4 layers, 16 heads, 4 KV heads,
intermediate 2816, vocab 4096 (--vocab); random weights from seed 0) exported with torch.export at batch
1 and 16, sequence 128, loaded onto a `tessera up` cluster of 2 CPU workers (OPENBLAS_NUM_THREADS=1
each) with its own tp_plan and its save_pretrained checkpoint, and its forward timed against
transformers in this process with one thread (torch.set_num_threads(1)), in the same run: the
median of the calls, and the ratio transformers / Tessera (above 1: Tessera is faster). The logits
are checked against transformers' first (rtol 1e-3, atol 1e-4).

usage: TORCH_PYTHON bench/import_bench.py TESSERA_CLI [--calls N] [--out results.json]
Needs torch and transformers (PyPI) and the Python client (PYTHONPATH=BUILD/client/python)."""

import argparse
import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import tempfile
import time

import numpy as np
import torch
import transformers


def median_ms(fn, calls):
    fn()  # warm-up
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out", default="")
    ap.add_argument("--layers", type=int, default=4)
    # 16 x 128 x 32000 float32 logits (262 MB) pass no gRPC message of the default 64 MiB limit.
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=1024, intermediate_size=2816,
                                      num_hidden_layers=args.layers, num_attention_heads=16,
                                      num_key_value_heads=4, max_position_embeddings=256,
                                      use_cache=False)
    model = transformers.LlamaForCausalLM(config).eval()
    work = pathlib.Path(tempfile.mkdtemp(prefix="tessera-import-bench-"))
    model.save_pretrained(str(work / "hf"))
    tp_plan = dict(model.tp_plan)
    archives = {}
    for batch in (1, 16):
        ids = torch.randint(0, args.vocab, (batch, 128))
        path = work / f"llama_b{batch}.pt2"
        torch.export.save(torch.export.export(model, (ids,)), str(path))
        archives[batch] = (path, ids)

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    up = subprocess.Popen([args.cli, "up", "--workers", "2", "--no-metrics"], stdout=subprocess.PIPE,
                          text=True, env=env)
    address = None
    for line in up.stdout:
        found = re.search(r"coordinator at (\S+),", line)
        if found:
            address = found.group(1)
            break
    import tessera

    results = []
    try:
        session = tessera.connect(address)
        mesh = tessera.get_device_mesh("world")
        for batch, (path, ids) in archives.items():
            start = time.perf_counter()
            m = tessera.load_module(path, mesh=mesh, tp_plan=tp_plan, weights=work / "hf",
                                    name=f"llama-b{batch}")
            load_s = time.perf_counter() - start
            with torch.no_grad():
                want = model(ids).logits.numpy()
            got = m(ids.numpy())
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
            with torch.no_grad():
                torch_ms = median_ms(lambda: model(ids), args.calls)
            tessera_ms = median_ms(lambda: m(ids.numpy()), args.calls)
            row = {"batch": batch, "seq": 128, "layers": args.layers, "workers": 2,
                   "transformers_ms": round(torch_ms, 1), "tessera_ms": round(tessera_ms, 1),
                   "ratio": round(torch_ms / tessera_ms, 2), "load_s": round(load_s, 1),
                   "steps_per_rank": m.info.program_steps,
                   "collectives": m.imported.collectives}
            print(json.dumps(row), flush=True)
            results.append(row)
            m.remove()
        session.close()
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
