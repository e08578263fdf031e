#!/usr/bin/env python3
"""The include structure of the sources, checked from the tree.

1. No include cycle between units (a unit is a file pair: x.h with x.cc, x.cu): a unit that
   includes another's header may not be reached back from it.
2. The coordinator's folders are layered: server/cluster < tables < transfers < modules <
   recovery < server/ itself (the services, metrics, main). A file includes headers of its own
   folder and of the folders below it only.

Usage: include_layers_test.py REPO_ROOT
"""

import pathlib
import re
import sys

SOURCE_FOLDERS = ["core", "kernels", "proto", "transfer", "security", "metrics", "daemon",
                  "worker", "server", "client", "include", "reference", "bench", "fuzz"]
SERVER_LAYERS = ["server/cluster", "server/tables", "server/transfers", "server/modules",
                 "server/recovery", "server"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def unit_of(path: str) -> str:
    """The unit of a source path: the path without its extension."""
    return re.sub(r"\.(h|cc|cu|cuh)$", "", path)


def layer_of(path: str) -> int:
    """The index in SERVER_LAYERS of the folder holding `path`, or -1 outside server/."""
    folder = str(pathlib.PurePosixPath(path).parent)
    return SERVER_LAYERS.index(folder) if folder in SERVER_LAYERS else -1


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    files = []
    for folder in SOURCE_FOLDERS:
        for ext in ("h", "cc", "cu", "cuh"):
            files.extend(p for p in (root / folder).rglob(f"*.{ext}") if "build" not in p.parts)
    edges: dict[str, set[str]] = {}
    failures = []
    known = {str(p.relative_to(root)) for p in files}
    for p in files:
        rel = str(p.relative_to(root))
        for inc in INCLUDE.findall(p.read_text(errors="replace")):
            if inc not in known:
                continue  # generated, system or third-party
            if unit_of(inc) != unit_of(rel):
                edges.setdefault(unit_of(rel), set()).add(unit_of(inc))
            mine, theirs = layer_of(rel), layer_of(inc)
            if mine >= 0 and theirs > mine:
                failures.append(f"{rel} includes {inc}: {SERVER_LAYERS[mine]}/ may include only "
                                f"{', '.join(l + '/' for l in SERVER_LAYERS[:mine + 1])}")
            if mine < 0 and theirs >= 0 and not rel.startswith(("tests/", "bench/", "fuzz/")):
                failures.append(f"{rel} includes {inc}: only the coordinator includes server/")

    # Cycles: a depth-first search over units, reporting each cycle once by its smallest unit.
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    cycles = set()

    def visit(u: str) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                cycle = stack[stack.index(v):]
                k = cycle.index(min(cycle))
                cycles.add(" -> ".join(cycle[k:] + cycle[:k] + [min(cycle)]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    sys.setrecursionlimit(10000)
    for u in sorted(edges):
        if u not in state:
            visit(u)
    failures.extend(f"include cycle: {c}" for c in sorted(cycles))
    for f in failures:
        print(f)
    if not failures:
        print(f"{len(files)} files, {sum(len(v) for v in edges.values())} unit includes: "
              "no cycle, server/ layered")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
