#!/usr/bin/env python3
"""Pipelined tiny adds per second from the Python client, with the op stream on and off.

Starts `tessera up --workers 2` (or uses --coordinator HOST:PORT), opens one session with the op
stream (the default) and one with op_stream=False, and times, round after round alternating the
two, N adds of two 1 KiB Shard(0) float32 tensors, each output dropped as the next arrives
(its free queued), until everything is done: the clock stops after Session.synchronize() and
the frees are answered. Prints the median ops/s of each mode and their ratio.

  PYTHONPATH=build/client/python python3 bench/python_ops_bench.py [--cli build/client/tessera]
"""

import argparse
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build" / "client" / "python"))

import numpy as np  # noqa: E402
import tessera  # noqa: E402


def start_cluster(cli: str, workers: int):
    process = subprocess.Popen([cli, "up", "--workers", str(workers)], stdout=subprocess.PIPE,
                               text=True)
    for line in process.stdout:
        found = re.search(r"coordinator at (\S+),", line)
        if found:
            return process, found.group(1)
    process.wait()
    sys.exit(f"tessera up ended without a coordinator address (exit {process.returncode})")


def adds_per_second(session: tessera.Session, ops: int) -> float:
    """N pipelined adds with dropped outputs, to completion."""
    mesh = tessera.get_device_mesh("world", session=session)
    a = tessera.distribute_tensor(np.ones(256, np.float32), mesh, [tessera.Shard(0)])
    b = tessera.distribute_tensor(np.full(256, 2, np.float32), mesh, [tessera.Shard(0)])
    session.synchronize()
    y = None
    start = time.perf_counter()
    for _ in range(ops):
        y = a + b  # the previous output is dropped here
    last = y
    session.synchronize()
    session.transport.drain_frees()
    seconds = time.perf_counter() - start
    assert last.full_tensor()[0] == 3.0
    return ops / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default=os.environ.get("TESSERA_CLI",
                                                        str(REPO / "build/client/tessera")))
    parser.add_argument("--coordinator", help="a running cluster's address (else tessera up)")
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    process = None
    address = args.coordinator
    if address is None:
        process, address = start_cluster(args.cli, 2)
    try:
        sessions = {True: tessera.Session(address), False: tessera.Session(address,
                                                                           op_stream=False)}
        for s in sessions.values():  # warm up: channels, the stream, the workers' first op
            adds_per_second(s, 200)
        rates = {True: [], False: []}
        for _ in range(args.rounds):
            for stream, s in sessions.items():
                rates[stream].append(adds_per_second(s, args.ops))
        for s in sessions.values():
            s.close()
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)

    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"{args.ops} pipelined 1 KiB adds, outputs dropped, 2 workers, median of "
          f"{args.rounds} rounds")
    print(f"  op stream on : {on:10,.0f} ops/s  (rounds: "
          f"{', '.join(f'{r:,.0f}' for r in rates[True])})")
    print(f"  op stream off: {off:10,.0f} ops/s  (rounds: "
          f"{', '.join(f'{r:,.0f}' for r in rates[False])})")
    print(f"  ratio        : {on / off:10.1f}x")


if __name__ == "__main__":
    main()
