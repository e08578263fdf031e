#!/usr/bin/env python3
"""The include structure of the sources, checked from the tree.

1. No include cycle between units (a unit is a file pair: x.h with x.cc, x.cu): a unit that
   includes another's header may not be reached back from it.
2. Folders are layered, lowest first: the coordinator's server/cluster < tables < transfers <
   modules < recovery < server/ itself (the services, metrics, main), the client's client/
   (the library) < client/local_cluster < client/cli, and core/ (the basic types) <
   core/sharding < core/ops < core/files < core/modules. A file includes headers of its own folder
   and of the folders below it only.

Usage: include_layers_test.py REPO_ROOT
"""

import pathlib
import re
import sys

SOURCE_FOLDERS = ["core", "import", "kernels", "proto", "transfer", "security", "metrics",
                  "daemon_support", "worker", "server", "client", "include", "reference", "bench",
                  "fuzz"]
LAYERS = [["server/cluster", "server/tables", "server/transfers", "server/modules",
           "server/recovery", "server"],
          ["client", "client/local_cluster", "client/cli"],
          ["core", "core/sharding", "core/ops", "core/files", "core/modules"]]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def unit_of(path: str) -> str:
    """The unit of a source path: the path without its extension."""
    return re.sub(r"\.(h|cc|cu|cuh)$", "", path)


def layer_of(path: str) -> tuple[int, int]:
    """(which list of LAYERS, the index in it) of the folder holding `path`, or (-1, -1)."""
    folder = str(pathlib.PurePosixPath(path).parent)
    for k, layers in enumerate(LAYERS):
        if folder in layers:
            return k, layers.index(folder)
    return -1, -1


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
            (k, mine), (j, theirs) = layer_of(rel), layer_of(inc)
            if k >= 0 and k == j and theirs > mine:
                failures.append(f"{rel} includes {inc}: {LAYERS[k][mine]}/ may include only "
                                f"{', '.join(f + '/' for f in LAYERS[k][:mine + 1])}")
            if (inc.startswith("server/") and not rel.startswith("server/") and
                    not rel.startswith(("tests/", "bench/", "fuzz/"))):
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
              "no cycle, server/, client/ and core/ layered")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
